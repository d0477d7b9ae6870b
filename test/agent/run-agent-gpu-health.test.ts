import { appendFileSync, cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { type AgentMessage, type GpuEvent, GpuEventKind, type Heartbeat, type Inventory, type Register, ShardState, type ShardStatus } from '../../src/gen/llmgw/v1/agent_pb.js';
import { agentConfigYaml, agentDirs } from '../helpers/agent-process.js';
import { freePort, isRunning, killEverything, until } from '../helpers/engine-processes.js';
import { runCli } from '../helpers/run-cli.js';
import { GPU_FIXTURES, replaceDataSetFile } from '../helpers/fake-gpus.js';
import { isRegister, shardIs, simStart } from '../helpers/sim-shards.js';
import { spawnAgentProcess } from '../helpers/spawn-agent-process.js';
import { shardFailurePath } from '../../src/lib/shard-layout.js';
import { startControlPlane } from '../helpers/start-control-plane.js';
import { buildFakeNvml, fakeNvmlUnavailable } from './discovery/fake-nvml.js';

/*
 * The agent's side of GPU health, end to end: a real `llmgw agent run` reading
 * the fake libnvidia-ml.so (fixtures/nvml/fake-nvml.c) and a fake kernel log,
 * a real reference control plane, real sim engines. Faults are injected
 * through the fake library's control file, as a driver would raise them.
 */

const unavailable = fakeNvmlUnavailable();
/**
 * A test's safety net: above the sum of its own waits (an agent's Register 20 s, a READY 30 s, a fault
 * 20 s, a refusal 20 s, CLI runs), which vitest's default 30 s was not: at load 20 the first two tests
 * took 22 and 29 s, passing.
 */
const TEST_TIMEOUT_MS = 180_000;
const NOT_HERE = '/nonexistent/nvidia-smi';

interface GpuAgentOptions {
  /** Load the fake NVML (default); false leaves the default library name, which is not on this machine. */
  nvml?: boolean;
  /** nvidia-smi path; the fake one by default. NOT_HERE proves a reading came through NVML. */
  nvidiaSmi?: string;
  /** discovery.interval: the health poll's period too. */
  interval?: string;
  /** Lines the fake NVML's control file starts with. */
  control?: string;
  /** The fake library's variant: 'old' lacks the optional entry points an old driver lacks. */
  variant?: 'current' | 'old';
}

/** Runs `fn` at the end: of the test by default (onTestFinished), of a describe for an agent its tests share. */
type OnEnd = (fn: () => unknown) => void;

/** A control plane, and a real agent on a copy of the hgx-h100x8 data set with the fake NVML and a kernel-log file. */
async function gpuAgent(o: GpuAgentOptions = {}, onEnd: OnEnd = (fn) => onTestFinished(async () => void (await fn()))) {
  const plane = await startControlPlane();
  const root = mkdtempSync(join(tmpdir(), 'llmgw-gpuhealth-'));
  const dirs = agentDirs(root);
  // Registered first, so it runs last (after hooks run as a stack): once agent and engines are gone.
  onEnd(() => rmSync(root, { recursive: true, force: true }));
  onEnd(() => killEverything(dirs.logDir));
  mkdirSync(root, { recursive: true });
  const dataset = join(root, 'gpus');
  cpSync(join(GPU_FIXTURES, 'hgx-h100x8'), dataset, { recursive: true });
  const control = join(root, 'nvml-control');
  writeFileSync(control, o.control ?? '');
  const kmsg = join(root, 'kmsg');
  writeFileSync(kmsg, '');
  const discovery = [
    'discovery:',
    ...(o.nvml === false ? [] : [`  nvml_library: ${buildFakeNvml(o.variant)}`]),
    `  kmsg: ${kmsg}`,
  ].join('\n');
  const yaml = agentConfigYaml({ server: plane.url, dirs, discoveryInterval: o.interval ?? '60s' })
    .replace(/^discovery:$/m, discovery)
    .replace(/^ {2}nvidia_smi: .*$/m, (line) => (o.nvidiaSmi ? `  nvidia_smi: ${o.nvidiaSmi}` : line));
  const configPath = join(root, 'agent.yaml');
  writeFileSync(configPath, yaml);
  /** Starts the agent (again, after a kill) and waits for its Register. */
  const spawn = async () => {
    const registered = plane.cp.waitFor('node-a', isRegister, 20_000);
    const { child, records } = spawnAgentProcess(configPath, { LLMGW_FAKE_GPUS: dataset, LLMGW_FAKE_NVML_CONTROL: control });
    const exited = child.then((r) => ({ exitCode: r.exitCode, atMs: Date.now() }));
    onEnd(async () => {
      child.kill('SIGKILL');
      await exited;
    });
    const register = (await registered).msg.value as Register;
    return { child, exited, records, register };
  };
  return { cp: plane.cp, plane, ...(await spawn()), spawn, dataset, control, kmsg, socket: dirs.socket, logDir: dirs.logDir };
}

type Started = Awaited<ReturnType<typeof gpuAgent>>;

/** Starts sim shard `id` on `gpu` and waits for READY; the engine's pid and port. */
async function readyShard(a: Started, id: string, gpu: number) {
  const port = await freePort();
  const ready = a.cp.waitFor('node-a', shardIs(id, ShardState.READY), 30_000);
  a.cp.send('node-a', { case: 'start', value: simStart(id, port, { gpu }) });
  const pid = ((await ready).msg.value as ShardStatus).pid;
  return { pid, port };
}

const isGpuEvent = (gpu: number, kind?: GpuEventKind) => (m: AgentMessage) =>
  m.msg.case === 'gpuEvent' && m.msg.value.gpuIndex === gpu && (kind === undefined || m.msg.value.kind === kind);

/** A StartShard for another shard on `gpu`: the error of its refusal. */
async function refusalOn(a: Started, id: string, gpu: number): Promise<string> {
  const refused = a.cp.waitFor('node-a', shardIs(id, ShardState.FAILED), 20_000);
  a.cp.send('node-a', { case: 'start', value: simStart(id, await freePort(), { gpu }) });
  return ((await refused).msg.value as ShardStatus).error;
}

/**
 * Injects a fault and checks what the control plane then hears: the
 * GpuEvent, the READY shard on that GPU UNHEALTHY with the cause, its engine
 * untouched, an Inventory with the GPU unhealthy, and a new StartShard on
 * the GPU refused naming the fault. Returns the injection-to-UNHEALTHY time.
 */
async function expectFaultReported(a: Started, inject: () => void, gpu: number, cause: RegExp, kind?: GpuEventKind, ids = { shard: 's1', refused: 's2' }): Promise<number> {
  const { pid, port } = await readyShard(a, ids.shard, gpu);
  const event = a.cp.waitFor('node-a', isGpuEvent(gpu, kind), 20_000);
  const unhealthy = a.cp.waitFor('node-a', shardIs(ids.shard, ShardState.UNHEALTHY), 20_000);
  const inventory = a.cp.waitFor('node-a', (m) => m.msg.case === 'inventory' && m.msg.value.gpus[gpu]?.healthy === false, 20_000);
  const injectedAt = Date.now();
  inject();
  const e = (await event).msg.value as GpuEvent;
  const status = (await unhealthy).msg.value as ShardStatus;
  const latencyMs = Date.now() - injectedAt;
  expect(e.message).toMatch(cause);
  expect(e.shardIds).toEqual([ids.shard]);
  expect(status.error).toMatch(cause);
  expect(status.error).toContain(`GPU ${gpu}: `);
  const gpuAfter = ((await inventory).msg.value as Inventory).gpus[gpu];
  expect(gpuAfter?.error).toMatch(cause);
  // The control plane decides what to do with the engine: it still runs and serves.
  expect(status.pid).toBe(pid);
  expect(isRunning(pid)).toBe(true);
  expect((await fetch(`http://127.0.0.1:${port}/health`)).status).toBe(200);
  const refusal = await refusalOn(a, ids.refused, gpu);
  expect(refusal).toContain(`GPU ${gpu}: `);
  expect(refusal).toMatch(cause);
  expect(refusal).toContain('until the fault clears');
  return latencyMs;
}

describe.skipIf(unavailable !== undefined)('llmgw agent run with GPUs read through NVML', { timeout: TEST_TIMEOUT_MS }, () => {
  it('registers the inventory NVML gives, and its heartbeats follow the GPUs memory with no nvidia-smi at all', async () => {
    const a = await gpuAgent({ nvidiaSmi: NOT_HERE });
    expect(a.register.inventory?.gpus.map((g) => g.memoryUsedMb)).toEqual([0, 1, 52, 71480, 71480, 3, 0, 17]);
    expect(a.register.inventory?.gpus[0]?.uuid).toBe('GPU-3f1c0a5e-8b2d-4c7a-9e61-000000000000');
    expect(a.records.some((r) => r.msg === 'GPUs read through NVML')).toBe(true);

    const csv = join(a.dataset, 'query-gpu.csv');
    const changed = a.cp.waitFor('node-a', (m) => m.msg.case === 'heartbeat' && (m.msg.value as Heartbeat).gpuMemoryUsedMb[0] === 12345, 20_000);
    replaceDataSetFile(csv, readFileSync(csv, 'utf8').replace(/(\n0, [^\n]*?81559 MiB, )0 MiB/, '$112345 MiB'));
    const hb = (await changed).msg.value as Heartbeat;
    expect(hb.gpuMemoryUsedMb.slice(1)).toEqual([1, 52, 71480, 71480, 3, 0, 17]);
  });

  it('after a restart, registers a GPU lost meanwhile as unhealthy and reports the adopted shard on it UNHEALTHY, same engine', async () => {
    const a = await gpuAgent();
    const { pid } = await readyShard(a, 's1', 1);
    a.child.kill('SIGKILL');
    await a.exited;
    appendFileSync(a.control, 'lost 1\n');
    const unhealthy = a.cp.waitFor('node-a', shardIs('s1', ShardState.UNHEALTHY), 30_000);
    const again = await a.spawn();
    expect(again.register.runningShards.map((r) => [r.shardId, r.pid])).toEqual([['s1', pid]]);
    // UNHEALTHY in Register already when the fault was found before the session; its cause follows it either way.
    expect(again.register.inventory?.gpus[1]).toMatchObject({ healthy: false, error: expect.stringMatching(/GPU is lost/) });
    const status = (await unhealthy).msg.value as ShardStatus;
    expect(status).toMatchObject({ pid, error: expect.stringMatching(/^GPU 1: GPU is lost/) });
    expect(isRunning(pid)).toBe(true);
  }, 90_000);

  it('clears a lost GPU once NVML answers for it again under the same UUID (a reset): RESET to the control plane, the shard READY, the GPU healthy', async () => {
    const a = await gpuAgent({ interval: '500ms' });
    await readyShard(a, 's1', 1);
    const unhealthy = a.cp.waitFor('node-a', shardIs('s1', ShardState.UNHEALTHY), 20_000);
    appendFileSync(a.control, 'lost 1\n');
    await unhealthy;
    const reset = a.cp.waitFor('node-a', isGpuEvent(1, GpuEventKind.RESET), 20_000);
    const ready = a.cp.waitFor('node-a', shardIs('s1', ShardState.READY), 20_000);
    const healthy = a.cp.waitFor('node-a', (m) => m.msg.case === 'inventory' && m.msg.value.gpus[1]?.healthy === true, 20_000);
    appendFileSync(a.control, 'reset 1\n');
    expect(((await reset).msg.value as GpuEvent).message).toMatch(/^GPU reset: NVML answers for it again under the same UUID; cleared: GPU is lost/);
    expect(((await ready).msg.value as ShardStatus).error).toBe('');
    await healthy;
  });

  it("runs on an old driver's NVML without its optional entry points, and still finds a lost GPU by the poll", async () => {
    const a = await gpuAgent({ variant: 'old', interval: '500ms' });
    expect(a.register.inventory?.gpus).toHaveLength(8);
    const ms = await expectFaultReported(a, () => appendFileSync(a.control, 'lost 1\n'), 1, /GPU is lost/, GpuEventKind.GPU_LOST);
    console.info(`old driver, lost GPU: shard UNHEALTHY ${ms} ms after the injection`);
    expect(a.records.filter((r) => r.level === 'error' || r.level === 'fatal' || r.level === 50 || r.level === 60)).toEqual([]);
  });

  it('falls back to nvidia-smi with one warning when NVML fails to initialise', async () => {
    const a = await gpuAgent({ control: 'init 9\n' });
    expect(a.register.inventory?.gpus).toHaveLength(8);
    const nvmlWarnings = a.records.filter((r) => r.level === 'warn' || (typeof r.level === 'number' && r.level === 40)).filter((r) => /nvml/i.test(JSON.stringify(r)));
    expect(nvmlWarnings).toHaveLength(1);
    expect(nvmlWarnings[0]?.msg).toBe('NVML unavailable; GPUs read through nvidia-smi');
  });

  it('exits promptly on SIGTERM while an NVML event wait is pending', async () => {
    const a = await gpuAgent();
    // Let the watch's event waits run for a while: one is always pending.
    await new Promise((r) => setTimeout(r, 500));
    const sentAt = Date.now();
    a.child.kill('SIGTERM');
    const exit = await a.exited;
    console.info(`agent with an NVML event wait pending exited ${exit.atMs - sentAt} ms after SIGTERM`);
    expect(exit.exitCode).toBe(0);
    expect(exit.atMs - sentAt).toBeLessThan(10_000);
  });
});

/*
 * Faults on one agent with NVML at its default poll, each test on a GPU of
 * its own (2, 1, 3) with shards of its own: a fault, and what the agent says
 * of it, concern only its GPU and the shard on it, as in the 500 ms group
 * below, so the tests share the agent's start (an agent and a control plane
 * each, some 1.5 s of CPU) and not their findings. The Xid test comes first:
 * its `ctl status` lists every GPU's health, all sound but its own.
 */
describe.skipIf(unavailable !== undefined)('llmgw agent run with GPUs read through NVML, one agent for faults on distinct GPUs', { timeout: TEST_TIMEOUT_MS }, () => {
  const ends: Array<() => unknown> = [];
  let a: Started;
  beforeAll(async () => {
    a = await gpuAgent({}, (fn) => ends.push(fn));
  }, 60_000);
  afterAll(async () => {
    for (const fn of ends.reverse()) await fn();
  }, 60_000);

    it('reports an Xid 79 from NVML as a GpuEvent and the READY shard on that GPU UNHEALTHY, engine untouched, and refuses new starts there', async () => {
      const ms = await expectFaultReported(a, () => appendFileSync(a.control, 'xid 2 79\n'), 2, /Xid 79: GPU has fallen off the bus/, GpuEventKind.XID);
      console.info(`Xid 79 through NVML: shard UNHEALTHY on the stream ${ms} ms after the injection`);

      const json = await runCli(['ctl', 'status', '--socket', a.socket, '--json']);
      expect(json.exitCode).toBe(0);
      const status = JSON.parse(json.stdout) as { gpus: { index: number; healthy: boolean; fault: string; recentEvents: { message: string; source: string }[] }[] };
      expect(status.gpus[2]).toMatchObject({ index: 2, healthy: false, fault: 'Xid 79: GPU has fallen off the bus' });
      expect(status.gpus[2]?.recentEvents.at(-1)).toMatchObject({ message: 'Xid 79: GPU has fallen off the bus', source: 'nvml' });
      expect(status.gpus.filter((g) => g.healthy).map((g) => g.index)).toEqual([0, 1, 3, 4, 5, 6, 7]);
      const text = (await runCli(['ctl', 'status', '--socket', a.socket])).stdout;
      expect(text).toMatch(/^2 +NVIDIA H100 80GB HBM3 +\d+ \/ 81559 MiB +UNHEALTHY +Xid 79: GPU has fallen off the bus \(nvml, /m);
      expect(text).toContain('GPU 2: Xid 79: GPU has fallen off the bus');
    });

    it('`ctl gpu clear` clears an Xid fault for an operator: logged with the uid, CLEARED_BY_OPERATOR to the control plane, the shard READY', async () => {
      await readyShard(a, 'clear-1', 1);
      const unhealthy = a.cp.waitFor('node-a', shardIs('clear-1', ShardState.UNHEALTHY), 20_000);
      appendFileSync(a.control, 'xid 1 94\n');
      await unhealthy;
      // Bad input is refused naming what is wrong, and changes nothing.
      const notANumber = await runCli(['ctl', 'gpu', 'clear', 'one', '--socket', a.socket]);
      expect([notANumber.exitCode, notANumber.stderr.trim()]).toEqual([2, expect.stringMatching(/GPU index must be a number such as 2, got "one"/)]);
      const noSuch = await runCli(['ctl', 'gpu', 'clear', '42', '--socket', a.socket]);
      expect(noSuch.exitCode).toBe(2);
      expect(noSuch.stderr).toMatch(/no GPU 42 on this node \(GPUs: 0, 1, 2, 3, 4, 5, 6, 7\)/);
      const badReason = await runCli(['ctl', 'gpu', 'clear', '1', '--reason', 'a\nforged line', '--socket', a.socket]);
      expect(badReason.exitCode).toBe(2);

      const cleared = a.cp.waitFor('node-a', isGpuEvent(1, GpuEventKind.CLEARED_BY_OPERATOR), 20_000);
      const ready = a.cp.waitFor('node-a', shardIs('clear-1', ShardState.READY), 20_000);
      const out = await runCli(['ctl', 'gpu', 'clear', '1', '--reason', 'reset with nvidia-smi -r', '--socket', a.socket]);
      expect(out.exitCode).toBe(0);
      expect(out.stdout.trim()).toBe('GPU 1: cleared Xid 94: contained ECC error; new shards may use it, and the control plane is told');
      const uid = process.getuid?.() ?? -1;
      expect(((await cleared).msg.value as GpuEvent).message).toBe(`cleared by uid ${uid}: reset with nvidia-smi -r; cleared: Xid 94: contained ECC error`);
      expect(((await ready).msg.value as ShardStatus).error).toBe('');
      expect(a.records.find((r) => r.msg === 'GPU faults cleared by an operator')).toMatchObject({ gpu: 1, uid, reason: 'reset with nvidia-smi -r' });
      const again = await runCli(['ctl', 'gpu', 'clear', '1', '--socket', a.socket, '--json']);
      const json = JSON.parse(again.stdout) as { cleared?: string[]; event?: unknown };
      expect([json.cleared ?? [], json.event]).toEqual([[], undefined]);
      // Five CLI processes on a busy two-core machine: a safety net, not a limit.
    }, 120_000);

    it('refuses a StartShard on GPU 3, whose 71480 MiB in use belong to no process, with the numbers', async () => {
      const refusal = await refusalOn(a, 'on-3', 3);
      expect(refusal).toContain('GPU 3: 71480 of 81559 MiB used and no process listed on it');
      expect(refusal).toContain('more than the 5% allowed');
    });
});

/*
 * The faults a 500 ms poll finds, each on a GPU of its own of one agent:
 * a fault, and what the agent says of it, concern only its GPU and the
 * shard on it (each waits for messages about its GPU and its shard alone),
 * so the tests share the agent's start and not their findings. (The reset
 * of a lost GPU keeps an agent of its own: on this one it once went
 * unreported for 20 s at load 19, a case not yet understood.)
 */
describe.skipIf(unavailable !== undefined)('llmgw agent run with GPUs read through NVML, polled every 500 ms', { timeout: TEST_TIMEOUT_MS }, () => {
  const ends: Array<() => unknown> = [];
  let a: Started;
  beforeAll(async () => {
    a = await gpuAgent({ interval: '500ms' }, (fn) => ends.push(fn));
  }, 60_000);
  afterAll(async () => {
    for (const fn of ends.reverse()) await fn();
  }, 60_000);

  it.each([
    ['a lost GPU', 5, 'lost 5', /GPU is lost \(NVML_ERROR_GPU_IS_LOST\)/, GpuEventKind.GPU_LOST],
    ['a double-bit ECC error', 6, 'dbe 6', /1 double-bit ECC error since the driver loaded/, GpuEventKind.ECC_DOUBLE_BIT],
    ['a pending row remap', 7, 'remap 7 pending', /row remap pending/, GpuEventKind.ROW_REMAP_PENDING],
  ])('reports %s with its own reason, the shard UNHEALTHY and new starts refused', async (_what, gpu, directive, cause, kind) => {
    const ms = await expectFaultReported(a, () => appendFileSync(a.control, `${directive}\n`), gpu, cause, kind, { shard: `on-${gpu}`, refused: `again-${gpu}` });
    console.info(`${directive}: shard UNHEALTHY on the stream ${ms} ms after the injection (poll every 500 ms)`);
  });

  it('returns the shard to READY when a pending row remap clears', async () => {
    await readyShard(a, 'remap-1', 1);
    const unhealthy = a.cp.waitFor('node-a', shardIs('remap-1', ShardState.UNHEALTHY), 20_000);
    appendFileSync(a.control, 'remap 1 pending\n');
    await unhealthy;
    const ready = a.cp.waitFor('node-a', shardIs('remap-1', ShardState.READY), 20_000);
    const cleared = a.cp.waitFor('node-a', isGpuEvent(1, GpuEventKind.CLEARED), 20_000);
    appendFileSync(a.control, 'remap 1 clear\n');
    await cleared;
    expect(((await ready).msg.value as ShardStatus).error).toBe('');
  });

  it('keeps the shard UNHEALTHY when the fault clears but its engine stopped answering meanwhile, READY once it answers', async () => {
    const { pid } = await readyShard(a, 'hung-2', 2);
    const unhealthy = a.cp.waitFor('node-a', shardIs('hung-2', ShardState.UNHEALTHY), 20_000);
    appendFileSync(a.control, 'remap 2 pending\n');
    await unhealthy;
    // A hung engine: alive, silent. Its probes fail while the GPU is still faulted.
    process.kill(pid, 'SIGSTOP');
    onTestFinished(() => {
      if (isRunning(pid)) process.kill(pid, 'SIGCONT');
    });
    await until(
      () => a.records.some((r) => r.msg === 'health probe verdict' && r.shard === 'hung-2' && r.healthy === false),
      'the hung engine fails its health probes',
      20_000,
    );
    const cleared = a.cp.waitFor('node-a', isGpuEvent(2, GpuEventKind.CLEARED), 20_000);
    appendFileSync(a.control, 'remap 2 clear\n');
    await cleared;
    const clearedAt = a.cp.messages('node-a').length;
    // It answers again: READY, since its GPU is sound now, and not before.
    const ready = a.cp.waitFor('node-a', shardIs('hung-2', ShardState.READY), 20_000);
    await new Promise((r) => setTimeout(r, 1000));
    expect(a.cp.messages('node-a').slice(clearedAt).filter(shardIs('hung-2', ShardState.READY))).toEqual([]);
    process.kill(pid, 'SIGCONT');
    expect(((await ready).msg.value as ShardStatus).pid).toBe(pid);
  });
});

/*
 * The kernel log as the only source, on one agent for two tests on GPUs of
 * their own (2 and 6), as above: an Xid 79 on GPU 2, and on GPU 6 the
 * failure record of a shard that crashed after an Xid 13 there, which holds
 * the events of its own GPUs only.
 */
describe('llmgw agent run watching the kernel log, one agent for faults on distinct GPUs', { timeout: TEST_TIMEOUT_MS }, () => {
  const ends: Array<() => unknown> = [];
  let a: Started;
  beforeAll(async () => {
    // No NVML here: the library name is the default, absent on this machine, so the kernel log is the only source.
    a = await gpuAgent({ nvml: false }, (fn) => ends.push(fn));
  }, 60_000);
  afterAll(async () => {
    for (const fn of ends.reverse()) await fn();
  }, 60_000);

    it('reports an NVRM Xid 79 line from the kernel log alone like the same Xid from NVML', async () => {
      expect(a.records.some((r) => /GPUs read through nvidia-smi/.test(String(r.msg)))).toBe(true);
      const line = `3,1234,${Math.floor(uptimeSeconds() * 1e6) + 1_000_000},-;NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n`;
      const ms = await expectFaultReported(a, () => appendFileSync(a.kmsg, line), 2, /Xid 79: GPU has fallen off the bus/, GpuEventKind.XID);
      console.info(`Xid 79 through the kernel log: shard UNHEALTHY on the stream ${ms} ms after the line was written`);
    });

    it("writes the shard's GPU events of the minute before its crash into its failure record", async () => {
      const { pid } = await readyShard(a, 'crash-6', 6);
      const event = a.cp.waitFor('node-a', isGpuEvent(6, GpuEventKind.XID), 20_000);
      // Xid 13, the application's fault: said, not held against the GPU; the engine then dies.
      appendFileSync(a.kmsg, `3,1235,${Math.floor(uptimeSeconds() * 1e6) + 1_000_000},-;NVRM: Xid (PCI:0000:ba:00): 13, pid=${pid}, name=python, Graphics Exception\n`);
      await event;
      const failed = a.cp.waitFor('node-a', shardIs('crash-6', ShardState.FAILED), 20_000);
      process.kill(pid, 'SIGKILL');
      await failed;
      const path = shardFailurePath(a.logDir, 'crash-6');
      await until(() => /"gpuEvents"/.test(readFileSync(path, 'utf8')), 'the GPU events in the failure record', 20_000);
      const record = JSON.parse(readFileSync(path, 'utf8')) as { exitCode: number; gpuEvents: { gpu: number; kind: string; xid: number; source: string }[] };
      expect(record.exitCode).toBe(137);
      expect(record.gpuEvents).toEqual([expect.objectContaining({ gpu: 6, kind: 'XID', xid: 13, source: 'kmsg' })]);
    });
});

describe('llmgw agent run watching the kernel log', { timeout: TEST_TIMEOUT_MS }, () => {
  it('reports a fault nvidia-smi reads ("GPU requires reset") as it does NVML\'s: a GpuEvent, the shard on it UNHEALTHY, and READY again once the scan reads it sound (walkthrough 3, item 4)', async () => {
    // No NVML: the scan (the fake nvidia-smi on a copy of the data set) is the only word on GPU health.
    const a = await gpuAgent({ nvml: false, interval: '1s' });
    const csv = join(a.dataset, 'query-gpu.csv');
    const sound = readFileSync(csv, 'utf8');
    const row2 = sound.split('\n').find((l) => l.startsWith('2, ')) as string;
    const [index, uuid, name, pci] = row2.split(', ');
    const faulty = sound.replace(row2, [index, uuid, name, pci, '[GPU requires reset]', '[GPU requires reset]', '550.54.15', '9.0', '[GPU requires reset]', '[GPU requires reset]', '[GPU requires reset]'].join(', '));
    await expectFaultReported(a, () => replaceDataSetFile(csv, faulty), 2, /GPU requires reset/, GpuEventKind.GPU_LOST);
    const cleared = a.cp.waitFor('node-a', isGpuEvent(2, GpuEventKind.CLEARED), 20_000);
    const ready = a.cp.waitFor('node-a', shardIs('s1', ShardState.READY), 20_000);
    replaceDataSetFile(csv, sound);
    await cleared;
    expect(((await ready).msg.value as ShardStatus).error).toBe('');
  });

  it('takes no Xid from a line any local user can have the kernel print: an Xid quoted by overlayfs, a user-facility record (security review 3, S7)', async () => {
    const a = await gpuAgent({ nvml: false });
    const usec = Math.floor(uptimeSeconds() * 1e6) + 1_000_000;
    const genuine = a.cp.waitFor('node-a', isGpuEvent(2, GpuEventKind.XID), 20_000);
    appendFileSync(
      a.kmsg,
      [
        `3,1240,${usec},-;overlayfs: failed to resolve 'NVRM: Xid (PCI:0000:3a:00): 79, pid=1, GPU has fallen off the bus.': -2`,
        `12,1241,${usec},-;NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.`,
        // The driver's own record after them: read in order, so once it is reported the forged ones were read too.
        `3,1242,${usec},-;NVRM: Xid (PCI:0000:3a:00): 13, pid=1, name=python, Graphics Exception`,
        '',
      ].join('\n'),
    );
    const event = (await genuine).msg.value as GpuEvent;
    expect(event.xid).toBe(13);
    expect(a.cp.messages('node-a').filter(isGpuEvent(2)).map((m) => (m.msg.value as GpuEvent).xid)).toEqual([13]);
    expect(a.records.some((r) => r.msg === 'GPU fault' && /Xid 79/.test(String(r.fault)))).toBe(false);
  });

  it('keeps a GpuEvent raised while the control plane is down and sends it once after the next Register, the Inventory carrying the fault', async () => {
    const a = await gpuAgent({ nvml: false });
    await a.plane.close();
    await until(() => a.records.some((r) => r.msg === 'cannot reach the control plane; retrying'), 'the agent notices the control plane is gone', 20_000);
    appendFileSync(a.kmsg, xid79Line());
    await until(() => a.records.some((r) => r.msg === 'GPU fault' && r.gpu === 2), 'the agent sees the Xid while disconnected', 20_000);

    const again = await startControlPlane({ port: a.plane.port });
    await again.cp.waitFor('node-a', isGpuEvent(2, GpuEventKind.XID), 20_000);
    // A few heartbeats more: a second copy would have arrived by then.
    await again.cp.waitFor('node-a', (m) => m.msg.case === 'heartbeat', 20_000);
    await new Promise((r) => setTimeout(r, 1000));
    const seen = again.cp.messages('node-a');
    const register = seen.findIndex(isRegister);
    const events = seen.filter(isGpuEvent(2));
    expect(events).toHaveLength(1);
    const [event] = events as [AgentMessage];
    expect((event.msg.value as GpuEvent).message).toBe('Xid 79: GPU has fallen off the bus');
    expect(register).toBeGreaterThanOrEqual(0);
    expect(seen.indexOf(event)).toBeGreaterThan(register);
    // The Register before it carries the GPU's fault, as the Inventory the event explains.
    expect(((seen[register] as AgentMessage).msg.value as Register).inventory?.gpus[2]).toMatchObject({ healthy: false, error: 'Xid 79: GPU has fallen off the bus' });
  });
});

function xid79Line(): string {
  return `3,1234,${Math.floor(uptimeSeconds() * 1e6) + 1_000_000},-;NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n`;
}

function uptimeSeconds(): number {
  return Number.parseFloat(readFileSync('/proc/uptime', 'utf8').split(' ')[0] ?? '0');
}
