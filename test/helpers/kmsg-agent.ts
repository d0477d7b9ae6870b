import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { onTestFinished } from 'vitest';
import { agentConfigYaml, agentDirs, tempAgentDirs } from './agent-process.js';
import { killEverything, removeDir } from './engine-processes.js';
import { isRegister } from './sim-shards.js';
import { spawnAgentProcess } from './spawn-agent-process.js';
import { startControlPlane } from './start-control-plane.js';

/** Runs `fn` at the end of what the agent serves, the last registered first (as hooks run): for a describe whose tests share it, in its afterAll. */
export type OnEnd = (fn: () => unknown) => void;

/**
 * A reference control plane and a real `llmgw agent run` on the fake 8-GPU
 * box, with a kernel-log file the test writes Xid lines to; registered
 * before it returns. The agent is killed when the test finishes; or, given
 * `onEnd` (an agent started in beforeAll for the tests of a describe), its
 * agent, then its control plane, engines and directories end through it.
 */
export async function kmsgAgent(prefix: string, onEnd?: OnEnd) {
  const plane = await startControlPlane();
  const { cp, url } = plane;
  let dirs: ReturnType<typeof agentDirs>;
  if (onEnd) {
    dirs = agentDirs(mkdtempSync(join(tmpdir(), prefix)));
    onEnd(async () => {
      await plane.close();
      await killEverything(dirs.logDir);
      removeDir(dirs.root);
    });
  } else {
    dirs = tempAgentDirs(prefix);
  }
  const kmsg = join(dirs.root, 'kmsg');
  writeFileSync(kmsg, '');
  const configPath = join(dirs.root, 'agent.yaml');
  writeFileSync(configPath, agentConfigYaml({ server: url, dirs }).replace(/^discovery:$/m, `discovery:\n  kmsg: ${kmsg}`));
  const registered = cp.waitFor('node-a', isRegister, 20_000);
  const { child, records } = spawnAgentProcess(configPath);
  const exited = child.then(() => undefined);
  const stop = async () => {
    child.kill('SIGKILL');
    await exited;
  };
  if (onEnd) onEnd(stop);
  else onTestFinished(stop);
  await registered;
  return { cp, kmsg, socket: dirs.socket, records };
}

/** An Xid 79 on GPU 2 of the fake box (PCI 0000:3a:00), as the driver writes it to the kernel log. */
export function xid79Line(): string {
  const uptimeUs = Math.floor(Number.parseFloat(readFileSync('/proc/uptime', 'utf8').split(' ')[0] ?? '0') * 1e6);
  return `3,1234,${uptimeUs + 1_000_000},-;NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n`;
}
