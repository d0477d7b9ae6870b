import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type AgentMessage, type Inventory, ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import { agentDirs, startAgentProcess } from '../helpers/agent-process.js';
import { freePort, isRunning, killEverything, until } from '../helpers/engine-processes.js';
import { freeFakeGpu } from '../helpers/fake-gpus.js';
import { runCli } from '../helpers/run-cli.js';
import { isRegister, shardIs, simStart } from '../helpers/sim-shards.js';
import { startControlPlane } from '../helpers/start-control-plane.js';

/*
 * Issue 28's acceptance: a tmpfs log dir filled while 3 engines serve. All
 * keep serving, disk pressure is reported on the stream and in ctl, a new
 * start is refused naming it, and logs resume once space returns. A full
 * log disk once took down every engine of a node within 30 s (walkthrough
 * 2, row 1). Needs root, for the mount.
 */

const diskPressure = (inv: Inventory | undefined) => inv?.conditions.find((c) => c.type === 'DiskPressure');
const inventoryWithPressure = (active: boolean) => (m: AgentMessage) => m.msg.case === 'inventory' && diskPressure(m.msg.value)?.active === active;
const serves = async (port: number) => (await fetch(`http://127.0.0.1:${port}/v1/models`, { signal: AbortSignal.timeout(5000) })).status === 200;
const size = (path: string) => statSync(path).size;

/** Fills the file system holding `dir` until it refuses with ENOSPC; returns the filler's path. */
function fill(dir: string): string {
  const filler = join(dir, 'filler');
  try {
    writeFileSync(filler, Buffer.alloc(64 * 1024 * 1024));
  } catch (err) {
    expect((err as NodeJS.ErrnoException).code).toBe('ENOSPC');
    return filler;
  }
  throw new Error(`${dir} did not fill up: is it really a small tmpfs?`);
}

describe.skipIf(process.getuid?.() !== 0)('a full log disk', () => {
  it('keeps 3 engines serving, reports DiskPressure on the stream and in ctl, refuses a start naming it, and logs resume when space returns', async () => {
    const { cp, url } = await startControlPlane();
    const dirs = agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-disk-pressure-')));
    mkdirSync(dirs.logDir, { recursive: true });
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=8m,mode=0755', 'tmpfs', dirs.logDir]);
    const agent = startAgentProcess({
      server: url,
      dirs,
      supervisor: ['disk_pressure:', '  min_free: 2MiB', '  interval: 200ms'],
    });
    try {
      await cp.waitFor('node-a', isRegister, 20_000);
      const engines: { id: string; port: number; pid: number }[] = [];
      for (const i of [0, 1, 2]) {
        const id = `s${i}`;
        const port = await freePort();
        const ready = cp.waitFor('node-a', shardIs(id, ShardState.READY, ShardState.FAILED), 30_000);
        cp.send('node-a', { case: 'start', value: simStart(id, port, { gpu: freeFakeGpu(i), args: ['--load-time', '100ms', '--log-rate', '50'] }) });
        const m = await ready;
        expect(ShardState[(m.msg.value as { state: ShardState }).state], (m.msg.value as { error: string }).error).toBe('READY');
        engines.push({ id, port, pid: (m.msg.value as { pid: number }).pid });
      }
      const logOf = (id: string) => join(dirs.logDir, 'shards', `${id}.log`);

      const pressure = cp.waitFor('node-a', inventoryWithPressure(true), 10_000);
      const filler = fill(dirs.logDir);
      const told = diskPressure((await pressure).msg.value as Inventory);
      expect(told?.reason).toMatch(/^log_dir .* has \d+(\.\d)? (B|KiB|MiB) free \(< 2 MiB\)$/);
      expect(told?.since).toBeDefined();
      // The log line comes over the agent's stderr pipe, which the test may read after the stream's message.
      await until(() => agent.logs().some((r) => r.msg === 'disk pressure'), "the agent's 'disk pressure' log line", 10_000);
      expect(agent.logs().filter((r) => r.msg === 'disk pressure')).toHaveLength(1);

      // Long enough for each engine to have had dozens of lines refused (50 a second).
      const stuck = new Map(engines.map((e) => [e.id, size(logOf(e.id))]));
      await new Promise((r) => setTimeout(r, 2000));
      for (const e of engines) {
        expect(isRunning(e.pid), `${e.id} died of the full log disk`).toBe(true);
        expect(await serves(e.port), `${e.id} stopped answering`).toBe(true);
        expect(size(logOf(e.id)), `${e.id} wrote to a full disk?`).toBeLessThanOrEqual((stuck.get(e.id) as number) + 4096);
      }

      const status = await runCli(['ctl', 'status', '--socket', dirs.socket]);
      expect(status.exitCode, status.stderr).toBe(0);
      expect(status.stdout).toMatch(/^conditions DiskPressure for .* \(log_dir .* free \(< 2 MiB\)\): new shards are refused$/m);
      const json = await runCli(['ctl', 'status', '--json', '--socket', dirs.socket]);
      const conditions = (JSON.parse(json.stdout) as { inventory: { conditions: { type: string; active?: boolean }[] } }).inventory.conditions;
      expect(conditions).toContainEqual(expect.objectContaining({ type: 'DiskPressure', active: true }));

      const refused = cp.waitFor('node-a', shardIs('late', ShardState.FAILED), 10_000);
      cp.send('node-a', { case: 'start', value: simStart('late', await freePort(), { gpu: freeFakeGpu(3) }) });
      expect((await refused).msg.value).toMatchObject({
        error: expect.stringMatching(/^node has disk pressure: log_dir \S+ has .* free \(< 2 MiB\); free space or lower supervisor\.disk_pressure\.min_free$/),
      });

      const cleared = cp.waitFor('node-a', inventoryWithPressure(false), 10_000);
      rmSync(filler);
      await cleared;
      await until(() => agent.logs().some((r) => r.msg === 'disk pressure cleared'), "the agent's 'disk pressure cleared' log line", 10_000);
      const resumedFrom = new Map(engines.map((e) => [e.id, size(logOf(e.id))]));
      for (const e of engines) {
        await until(() => size(logOf(e.id)) > (resumedFrom.get(e.id) as number) + 1024, `${e.id}'s log to grow again`, 10_000);
        expect(await serves(e.port)).toBe(true);
      }
    } finally {
      // Engines first: a mount with engines writing to it cannot be unmounted cleanly.
      agent.kill('SIGKILL');
      await agent.exited;
      await killEverything(dirs.logDir);
      execFileSync('umount', ['-l', dirs.logDir]);
      rmSync(dirs.root, { recursive: true, force: true });
    }
  }, 120_000);
});
