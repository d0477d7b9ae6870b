import { appendFileSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { create } from '@bufbuild/protobuf';
import { GpuEventKind, ShardState, type ShardStatus, StopShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { agentConfigYaml, tempAgentDirs } from '../helpers/agent-process.js';
import { freePort, until } from '../helpers/engine-processes.js';
import { type Family, namingProblems, parsePrometheusText } from '../helpers/prometheus-text.js';
import { isRegister, shardIs, simStart } from '../helpers/sim-shards.js';
import { spawnAgentProcess } from '../helpers/spawn-agent-process.js';
import { startControlPlane } from '../helpers/start-control-plane.js';

/*
 * A real `llmgw agent run` with metrics_addr, scraped as Prometheus would:
 * the exposition is read by a strict parser (test/helpers/prometheus-text.ts),
 * every family docs/metrics-alerts.md lists is checked for its labels, and a shard's
 * series are gone once the control plane has stopped (and so removed) it.
 */

const GPU = ['gpu', 'UUID', 'pci_bus_id'];
const SHARD = ['shard', 'replica', 'model', 'engine', 'gpus'];

/** Family name → the labels each of its samples carries (histograms: besides le). */
const FAMILIES: Record<string, string[]> = {
  llmgw_build_info: ['version', 'node'],
  llmgw_agent_connected: [],
  llmgw_agent_stream_state: ['state'],
  llmgw_agent_outbox_messages: [],
  llmgw_agent_admin_connections: [],
  llmgw_agent_admin_connections_refused_total: [],
  llmgw_agent_reconnects_total: [],
  llmgw_agent_messages_sent_total: ['type'],
  llmgw_agent_heartbeat_send_seconds: [],
  llmgw_agent_shards: ['state'],
  llmgw_gpu_memory_used_bytes: GPU,
  llmgw_gpu_memory_total_bytes: GPU,
  llmgw_gpu_healthy: GPU,
  llmgw_shard_state: [...SHARD, 'state'],
  llmgw_shard_restarts_total: SHARD,
  llmgw_shard_readiness_seconds: SHARD,
  llmgw_shard_requests_in_flight: SHARD,
  llmgw_shard_generation_tokens_per_second: SHARD,
  llmgw_shard_gpu_info: ['shard', 'replica', 'gpu', 'UUID', 'pci_bus_id'],
  llmgw_replica_launches_total: ['replica', 'model', 'engine'],
  llmgw_model_time_to_ready_seconds: ['model', 'engine', 'profile', 'from'],
  llmgw_model_time_to_ready_percentile_seconds: ['model', 'engine', 'profile', 'from', 'percentile'],
  llmgw_model_warmth_info: ['model', 'engine', 'profile', 'rung'],
  // prom-client's default collectors: the process and the Node runtime.
  process_cpu_user_seconds_total: [],
  process_resident_memory_bytes: [],
  process_start_time_seconds: [],
  nodejs_eventloop_lag_seconds: [],
  nodejs_heap_size_used_bytes: [],
  nodejs_version_info: ['version', 'major', 'minor', 'patch'],
};

function uptimeSeconds(): number {
  return Number.parseFloat(readFileSync('/proc/uptime', 'utf8').split(' ')[0] ?? '0');
}

async function scrape(port: number): Promise<Map<string, Family>> {
  const res = await fetch(`http://127.0.0.1:${port}/metrics`);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  return parsePrometheusText(await res.text());
}

function samples(families: Map<string, Family>, name: string, labels: Record<string, string> = {}) {
  const f = families.get(name.replace(/_(bucket|sum|count)$/, ''));
  return (f?.samples ?? []).filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
}

function value(families: Map<string, Family>, name: string, labels: Record<string, string> = {}): number | undefined {
  const found = samples(families, name, labels);
  if (found.length > 1) throw new Error(`${name} ${JSON.stringify(labels)} matches ${found.length} series`);
  return found[0]?.value;
}

/** An agent with metrics on a free port and a kernel-log file the test writes Xid lines to. */
async function metricsAgent(server: string) {
  const dirs = tempAgentDirs('llmgw-scrape-');
  const port = await freePort();
  const kmsg = join(dirs.root, 'kmsg');
  writeFileSync(kmsg, '');
  const configPath = join(dirs.root, 'agent.yaml');
  const yaml = agentConfigYaml({ server, dirs, extraYaml: `metrics_addr: 127.0.0.1:${port}\n` }).replace(/^discovery:$/m, `discovery:\n  kmsg: ${kmsg}`);
  writeFileSync(configPath, yaml);
  const { child } = spawnAgentProcess(configPath);
  const exited = child.then(() => undefined);
  onTestFinished(async () => {
    child.kill('SIGKILL');
    await exited;
  });
  return { port, kmsg };
}

describe('llmgw agent run, scraped by Prometheus', () => {
  it('serves every family with its labels under valid names in base units, and no series of a shard once it is removed', async () => {
    const { cp, url } = await startControlPlane();
    const registered = cp.waitFor('node-a', isRegister, 20_000);
    const { port, kmsg } = await metricsAgent(url);
    await registered;
    await until(async () => (await fetch(`http://127.0.0.1:${port}/readyz`)).status === 200, '/readyz 200 once registered');
    expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);

    // A shard launched, its engine killed, launched again: one restart, two readiness observations.
    const shardPort = await freePort();
    let ready = cp.waitFor('node-a', shardIs('s1', ShardState.READY), 30_000);
    cp.send('node-a', { case: 'start', value: simStart('s1', shardPort) });
    const pid = ((await ready).msg.value as ShardStatus).pid;
    const ended = cp.waitFor('node-a', shardIs('s1', ShardState.FAILED, ShardState.EXITED), 20_000);
    process.kill(pid, 'SIGKILL');
    await ended;
    ready = cp.waitFor('node-a', shardIs('s1', ShardState.READY), 30_000);
    cp.send('node-a', { case: 'start', value: simStart('s1', shardPort) });
    await ready;

    // An Xid 79 on GPU 2 (PCI 0000:3a:00) in the kernel log.
    const gpuEvent = cp.waitFor('node-a', (m) => m.msg.case === 'gpuEvent' && m.msg.value.gpuIndex === 2 && m.msg.value.kind === GpuEventKind.XID, 20_000);
    appendFileSync(kmsg, `3,1234,${Math.floor(uptimeSeconds() * 1e6) + 1_000_000},-;NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n`);
    await gpuEvent;

    // The token rate needs two of the health watch's /metrics reads after READY (health_interval 500ms).
    let m = await scrape(port);
    await until(async () => {
      m = await scrape(port);
      return samples(m, 'llmgw_shard_generation_tokens_per_second').length > 0;
    }, 'a token rate for s1', 30_000);
    for (const [name, labels] of Object.entries(FAMILIES)) {
      const f = m.get(name);
      expect(f, `family ${name}`).toBeDefined();
      expect(f?.samples.length, `samples of ${name}`).toBeGreaterThan(0);
      for (const s of f?.samples ?? []) expect(Object.keys(s.labels).filter((k) => k !== 'le').sort(), `labels of ${s.name}`).toEqual([...labels].sort());
    }
    const problems = [...m.values()].filter((f) => f.name.startsWith('llmgw_')).flatMap(namingProblems);
    expect(problems).toEqual([]);
    expect(m.has('llmgw_gpu_memory_used_mb')).toBe(false);

    // The values, in base units.
    expect(value(m, 'llmgw_build_info', { node: 'node-a' })).toBe(1);
    expect(value(m, 'llmgw_agent_stream_state', { state: 'connected' })).toBe(1);
    expect(value(m, 'llmgw_agent_stream_state', { state: 'retrying' })).toBe(0);
    const gpu0 = { gpu: '0' };
    const total = value(m, 'llmgw_gpu_memory_total_bytes', gpu0) ?? 0;
    expect(total % (1024 * 1024)).toBe(0);
    expect(total).toBeGreaterThan(16 * 1024 ** 3); // an H100's 80 GiB, not 81559 "MB"
    expect(samples(m, 'llmgw_gpu_memory_used_bytes', gpu0)[0]?.labels.UUID).toMatch(/^GPU-[0-9a-f-]+$/);
    expect(samples(m, 'llmgw_gpu_memory_used_bytes', { gpu: '2' })[0]?.labels.pci_bus_id).toMatch(/3A:00\.0$/i);
    expect(value(m, 'llmgw_gpu_healthy', gpu0)).toBe(1);
    expect(value(m, 'llmgw_gpu_healthy', { gpu: '2' })).toBe(0);
    expect(value(m, 'llmgw_gpu_fault_info', { gpu: '2', kind: 'xid', xid: '79', source: 'kmsg' })).toBe(1);
    // GPUs 3 and 4 of the data set hold memory no process accounts for: sound, but no shard starts there, and the
    // metrics say so as StartShard and ctl status do (walkthrough 3, item 5).
    expect(samples(m, 'llmgw_gpu_fault_info').map((s) => [s.labels.gpu, s.labels.kind])).toEqual([['2', 'xid'], ['3', 'foreign_memory'], ['4', 'foreign_memory']]);
    expect(value(m, 'llmgw_gpu_healthy', { gpu: '3' })).toBe(0);
    expect(value(m, 'llmgw_gpu_events_total', { gpu: '2', kind: 'xid', xid: '79' })).toBe(1);
    const s1 = { shard: 's1', replica: 'r-s1', model: 'sim/m', engine: 'sim', gpus: '0' };
    expect(value(m, 'llmgw_shard_state', { ...s1, state: 'READY' })).toBe(1);
    // What joins the shard to its GPUs' series (dcgm-exporter's included), by UUID (walkthrough 3, item 6).
    const joined = samples(m, 'llmgw_shard_gpu_info', { shard: 's1' });
    expect(joined.map((x) => [x.labels.gpu, x.value])).toEqual([['0', 1]]);
    expect(joined[0]?.labels.UUID).toBe(samples(m, 'llmgw_gpu_memory_used_bytes', gpu0)[0]?.labels.UUID);
    expect(samples(m, 'llmgw_shard_state', { shard: 's1' }).filter((s) => s.value === 1)).toHaveLength(1);
    expect(value(m, 'llmgw_shard_restarts_total', s1)).toBe(1);
    expect(value(m, 'llmgw_shard_readiness_seconds_count', s1)).toBe(2);
    const lagS = value(m, 'llmgw_shard_readiness_seconds_sum', s1) ?? 0;
    expect(lagS).toBeGreaterThan(0.2); // the sim engine's --load-time 200ms, twice: seconds, not ms
    expect(lagS).toBeLessThan(120);
    expect(value(m, 'llmgw_shard_requests_in_flight', s1)).toBe(0);
    // Two launches of the replica, each timed to READY (issue 41): the model is served here now.
    expect(value(m, 'llmgw_replica_launches_total', { replica: 'r-s1', model: 'sim/m', engine: 'sim' })).toBe(2);
    const model = { model: 'sim/m', engine: 'sim', profile: 'sim-small' };
    expect(value(m, 'llmgw_model_time_to_ready_seconds', { ...model, from: 'unmanaged' })).toBeGreaterThan(0.2);
    // Its spread (issue 51): P90 at or above P50, both measured.
    const p50 = value(m, 'llmgw_model_time_to_ready_percentile_seconds', { ...model, from: 'unmanaged', percentile: '50' }) ?? 0;
    expect(p50).toBeGreaterThan(0.2);
    expect(value(m, 'llmgw_model_time_to_ready_percentile_seconds', { ...model, from: 'unmanaged', percentile: '90' })).toBeGreaterThanOrEqual(p50);
    expect(value(m, 'llmgw_model_warmth_info', { ...model, rung: 'serving' })).toBe(1);
    expect(value(m, 'llmgw_shard_generation_tokens_per_second', s1)).toBe(0);

    // A stream that generates: the agent's reading of the token counter rises above 0.
    const load = new AbortController();
    const body = JSON.stringify({ model: 'm', prompt: 'x', max_tokens: 100_000, stream: true });
    void fetch(`http://127.0.0.1:${shardPort}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body, signal: load.signal })
      .then((r) => r.text())
      .catch(() => undefined);
    try {
      await until(async () => {
        m = await scrape(port);
        return (value(m, 'llmgw_shard_generation_tokens_per_second', s1) ?? 0) > 0;
      }, 'a token rate above 0 while s1 streams', 30_000);
    } finally {
      load.abort();
    }

    // Stopped by the control plane, which removes it: not one series names it.
    const stopped = cp.waitFor('node-a', shardIs('s1', ShardState.STOPPED), 20_000);
    cp.send('node-a', { case: 'stop', value: create(StopShardSchema, { shardId: 's1' }) });
    await stopped;
    // A rendering is served for a second (security review 3, S10): scraped until one is newer than the removal.
    const seriesOf = (id: string) => [...m.values()].flatMap((f) => f.samples).filter((s) => s.labels.shard === id);
    await until(async () => {
      m = await scrape(port);
      return seriesOf('s1').length === 0;
    }, 'the stopped shard removed from every series', 20_000);
    expect(value(m, 'llmgw_agent_shards', { state: 'STOPPED' })).toBeUndefined();
    // The GPU's event count outlives the shard: a counter that vanished would read as a reset.
    expect(value(m, 'llmgw_gpu_events_total', { gpu: '2', kind: 'xid', xid: '79' })).toBe(1);
  }, 120_000);

  it('answers /healthz but /readyz 503 with the reason while it cannot register', async () => {
    const nobody = await freePort();
    const { port } = await metricsAgent(`http://127.0.0.1:${nobody}`);
    await until(async () => (await fetch(`http://127.0.0.1:${port}/healthz`).catch(() => undefined))?.status === 200, '/healthz 200');
    // Once the first dial has been refused: the reason names the phase and the error.
    let res = { status: 0, text: '' };
    await until(async () => {
      const r = await fetch(`http://127.0.0.1:${port}/readyz`);
      res = { status: r.status, text: await r.text() };
      return res.text.includes('retrying');
    }, '/readyz saying retrying');
    expect(res.status).toBe(503);
    expect(res.text).toMatch(/^not registered with the control plane \(retrying: .+\)/);
    const m = await scrape(port);
    expect(value(m, 'llmgw_agent_stream_state', { state: 'connected' })).toBe(0);
  });
});
