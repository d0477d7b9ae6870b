import { appendFileSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { GpuEventKind, ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import { agentConfigYaml, tempAgentDirs } from '../helpers/agent-process.js';
import { freePort, until } from '../helpers/engine-processes.js';
import { ensurePromtool, promtool } from '../helpers/promtool.js';
import { runCli } from '../helpers/run-cli.js';
import { isRegister, shardIs, simStart } from '../helpers/sim-shards.js';
import { spawnAgentProcess } from '../helpers/spawn-agent-process.js';
import { startControlPlane } from '../helpers/start-control-plane.js';

/*
 * A live agent's /metrics as Prometheus's own linter reads it (walkthrough 4,
 * O6: prom-client's `nodejs_active_*_total` gauges made `promtool check
 * metrics` exit 3), and llmgw_gpu_events_total born at 0 for each GPU's fault
 * kinds (O2: born at 1, `increase()` never saw a GPU's first fault).
 */

beforeAll(async () => {
  await ensurePromtool();
}, 600_000);

function uptimeSeconds(): number {
  return Number.parseFloat(readFileSync('/proc/uptime', 'utf8').split(' ')[0] ?? '0');
}

/** The value of the one sample of `name` whose labels include `labels`, or undefined. */
function sample(text: string, name: string, labels: Record<string, string>): number | undefined {
  const lines = text.split('\n').filter((l) => l.startsWith(`${name}{`) && Object.entries(labels).every(([k, v]) => l.includes(`${k}="${v}"`)));
  if (lines.length > 1) throw new Error(`${name} ${JSON.stringify(labels)} matches ${lines.length} series`);
  return lines[0] === undefined ? undefined : Number(lines[0].split(' ').at(-1));
}

describe('a live agent scraped by promtool (walkthrough 4, O2 and O6)', () => {
  it('passes `promtool check metrics` with a shard and a GPU fault, and counts GPU events from 0: a first fault is an increase, an operator clear is no fault', async () => {
    const { cp, url } = await startControlPlane();
    const dirs = tempAgentDirs('llmgw-promtool-');
    const port = await freePort();
    const kmsg = join(dirs.root, 'kmsg');
    writeFileSync(kmsg, '');
    const configPath = join(dirs.root, 'agent.yaml');
    writeFileSync(configPath, agentConfigYaml({ server: url, dirs, extraYaml: `metrics_addr: 127.0.0.1:${port}\n` }).replace(/^discovery:$/m, `discovery:\n  kmsg: ${kmsg}`));
    const registered = cp.waitFor('node-a', isRegister, 20_000);
    const { child } = spawnAgentProcess(configPath);
    const exited = child.then(() => undefined);
    onTestFinished(async () => {
      child.kill('SIGKILL');
      await exited;
    });
    await registered;
    const scrape = async () => (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    await until(async () => (await fetch(`http://127.0.0.1:${port}/readyz`).catch(() => undefined))?.status === 200, '/readyz 200');

    // Before any fault: every GPU's fault series are there, at 0.
    let text = await scrape();
    for (const gpu of ['0', '2', '7']) {
      expect(sample(text, 'llmgw_gpu_events_total', { gpu, kind: 'xid', xid: '79' }), `GPU ${gpu} Xid 79`).toBe(0);
      expect(sample(text, 'llmgw_gpu_events_total', { gpu, kind: 'gpu_lost', xid: '0' }), `GPU ${gpu} gpu_lost`).toBe(0);
      expect(sample(text, 'llmgw_gpu_events_total', { gpu, kind: 'ecc_double_bit', xid: '0' })).toBe(0);
    }
    expect(text).not.toMatch(/^nodejs_active_\w+_total/m);
    expect(text).toMatch(/^nodejs_active_handles\{type="\w+"\} \d+$/m);

    // A shard and a fault on its GPU: more families, and the counter goes 0 → 1.
    const ready = cp.waitFor('node-a', shardIs('s1', ShardState.READY), 30_000);
    cp.send('node-a', { case: 'start', value: simStart('s1', await freePort(), { gpu: 2 }) });
    await ready;
    const fault = cp.waitFor('node-a', (m) => m.msg.case === 'gpuEvent' && m.msg.value.gpuIndex === 2 && m.msg.value.kind === GpuEventKind.XID, 20_000);
    appendFileSync(kmsg, `3,1234,${Math.floor(uptimeSeconds() * 1e6) + 1_000_000},-;NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n`);
    await fault;
    const cleared = cp.waitFor('node-a', (m) => m.msg.case === 'gpuEvent' && m.msg.value.gpuIndex === 2 && m.msg.value.kind === GpuEventKind.CLEARED_BY_OPERATOR, 20_000);
    expect((await runCli(['ctl', 'gpu', 'clear', '2', '--reason', 'reset', '--socket', dirs.socket])).exitCode).toBe(0);
    await cleared;
    // A rendering is reused for a second (metrics-server.ts RENDER_CACHE_MS): on a quiet machine the fault and its
    // clear can come within the second after the scrape above, whose text would be served again.
    await until(async () => {
      text = await scrape();
      return sample(text, 'llmgw_gpu_events_total', { gpu: '2', kind: 'cleared_by_operator', xid: '0' }) === 1;
    }, 'a rendering newer than the operator clear');
    expect(sample(text, 'llmgw_gpu_events_total', { gpu: '2', kind: 'xid', xid: '79' })).toBe(1);
    expect(sample(text, 'llmgw_gpu_events_total', { gpu: '2', kind: 'cleared_by_operator', xid: '0' })).toBe(1);
    // The clear is counted under its own kind and no fault kind moved: the GPU-event alert excludes it.
    expect(sample(text, 'llmgw_gpu_events_total', { gpu: '2', kind: 'gpu_lost', xid: '0' })).toBe(0);
    expect(text).toMatch(/^llmgw_shard_state\{shard="s1"/m);

    const checked = await promtool(['check', 'metrics'], text);
    expect(checked, checked.output).toEqual({ exitCode: 0, output: '' });
  }, 120_000);
});
