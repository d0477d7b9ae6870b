import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { onTestFinished } from 'vitest';
import { agentConfigYaml, tempAgentDirs } from './agent-process.js';
import { isRegister } from './sim-shards.js';
import { spawnAgentProcess } from './spawn-agent-process.js';
import { startControlPlane } from './start-control-plane.js';

/**
 * A reference control plane and a real `llmgw agent run` on the fake 8-GPU
 * box, with a kernel-log file the test writes Xid lines to; registered
 * before it returns. The agent is killed when the test finishes.
 */
export async function kmsgAgent(prefix: string) {
  const { cp, url } = await startControlPlane();
  const dirs = tempAgentDirs(prefix);
  const kmsg = join(dirs.root, 'kmsg');
  writeFileSync(kmsg, '');
  const configPath = join(dirs.root, 'agent.yaml');
  writeFileSync(configPath, agentConfigYaml({ server: url, dirs }).replace(/^discovery:$/m, `discovery:\n  kmsg: ${kmsg}`));
  const registered = cp.waitFor('node-a', isRegister, 20_000);
  const { child, records } = spawnAgentProcess(configPath);
  const exited = child.then(() => undefined);
  onTestFinished(async () => {
    child.kill('SIGKILL');
    await exited;
  });
  await registered;
  return { cp, kmsg, socket: dirs.socket, records };
}

/** An Xid 79 on GPU 2 of the fake box (PCI 0000:3a:00), as the driver writes it to the kernel log. */
export function xid79Line(): string {
  const uptimeUs = Math.floor(Number.parseFloat(readFileSync('/proc/uptime', 'utf8').split(' ')[0] ?? '0') * 1e6);
  return `3,1234,${uptimeUs + 1_000_000},-;NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n`;
}
