import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'vitest';
import { ControlPlane } from '../../src/control/control-plane.js';
import { agentConfigYaml, agentDirs } from '../helpers/agent-process.js';
import { killEverything, removeDir } from '../helpers/engine-processes.js';
import { isRegister } from '../helpers/sim-shards.js';
import { spawnAgentProcess } from '../helpers/spawn-agent-process.js';
import { MAX_AGENT_RSS_BYTES } from './agent-unharmed.js';

/*
 * The real `llmgw agent run` with a discovery.kmsg that is no kernel log.
 * /dev/null (where containers map /dev/kmsg) once reached libuv as a stream:
 * epoll_ctl refused it (EPERM), libuv called abort(), and the agent died with
 * exit 134 and nothing logged, every ~2 s under Restart=always (security
 * review 2, N5). Each case must leave an agent that registers, lives, and says
 * once what is wrong and what to set.
 */

/** How long the agent must outlive its Register: the abort came on the first loop turn after the health watch started. */
const ALIVE_MS = 3_000;

function peakRssBytes(pid: number): number {
  return Number(/^VmHWM:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]) * 1024;
}

/*
 * The three cases run side by side, each its own control plane, agent and folder: most of a case is
 * its agent living ALIVE_MS, which they can wait out together. Concurrent tests get their cleanup and
 * expect from their own context (vitest tracks no concurrent test in the global hooks), so the
 * control plane and folder are made here, as test/helpers/start-control-plane.ts and tempAgentDirs do.
 */
describe('the agent with a discovery.kmsg that is not a kernel log', () => {
  it.concurrent.for([
    ['/dev/null, where containers map /dev/kmsg', () => '/dev/null', /^kernel log not read: discovery\.kmsg \/dev\/null is the character device 1:3 \(\/dev\/null\)/],
    ['a directory', (root: string) => root, /^kernel log not read: discovery\.kmsg \S+ is a directory/],
    ['a missing path', (root: string) => join(root, 'no-such-kmsg'), /^kernel log unreadable: /],
  ] as const)('registers, stays up and warns once, naming the path and the fix, when it is %s', async ([_name, kmsgOf, warning], { expect, onTestFinished }) => {
    const cp = new ControlPlane({ placementDelayMs: 0 });
    onTestFinished(() => cp.close());
    const plane = { cp, ...(await cp.listen({ host: '127.0.0.1', port: 0 })) };
    const dirs = agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-kmsg-')));
    onTestFinished(async () => {
      await killEverything(dirs.logDir);
      removeDir(dirs.root);
    });
    const kmsg = kmsgOf(dirs.root);
    const configPath = join(dirs.root, 'agent.yaml');
    writeFileSync(configPath, agentConfigYaml({ server: plane.url, dirs }).replace(/^discovery:$/m, `discovery:\n  kmsg: ${kmsg}`));
    const registered = plane.cp.waitFor('node-a', isRegister, 20_000);
    const { child, records } = spawnAgentProcess(configPath);
    let exit: { exitCode?: number; signal?: string } | undefined;
    const exited = child.then((r) => {
      exit = { exitCode: r.exitCode, signal: r.signal };
    });
    onTestFinished(async () => {
      child.kill('SIGKILL');
      await exited;
    });
    const died = exited.then(() => {
      throw new Error(`the agent exited before its Register: ${JSON.stringify(exit)}; last log: ${JSON.stringify(records.at(-1))}`);
    });
    await Promise.race([registered, died]);
    await Promise.race([new Promise((r) => setTimeout(r, ALIVE_MS)), died.catch(() => {})]);
    expect(exit, 'the agent is still running').toBeUndefined();

    const kmsgWarnings = records.filter((r) => r.level === 'warn' && /^kernel log/.test(String(r.msg)));
    expect(kmsgWarnings).toHaveLength(1);
    expect(kmsgWarnings[0]).toMatchObject({ path: kmsg });
    expect(String(kmsgWarnings[0]?.msg)).toMatch(warning);
    expect(String(kmsgWarnings[0]?.msg)).toMatch(/Xids only NVML reports will be seen; set discovery\.kmsg to \/dev\/kmsg or a file$/);

    const peak = peakRssBytes(child.pid as number);
    expect(peak).toBeGreaterThan(0);
    expect(peak, `peak RSS ${(peak / 1024 / 1024).toFixed(1)} MB`).toBeLessThan(MAX_AGENT_RSS_BYTES);
  });
});
