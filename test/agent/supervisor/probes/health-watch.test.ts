import { type Server, createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { type HealthVerdict, UNHEALTHY_AFTER_FAILURES, watchHealth } from '../../../../src/agent/supervisor/probes/health-watch.js';
import type { EngineLoad } from '../../../../src/agent/supervisor/probes/load-meter.js';
import type { PortOwner } from '../../../../src/agent/supervisor/probes/port-owner-check.js';
import { SGLANG_METRICS } from '../../../../src/agent/engines/sglang/sglang-engine.js';
import { until } from '../../../helpers/engine-processes.js';

const servers: Server[] = [];
const aborts: AbortController[] = [];
afterEach(() => {
  for (const a of aborts.splice(0)) a.abort();
  for (const s of servers.splice(0)) s.close();
});

/** A real engine endpoint whose /health status and /metrics series the test sets. */
async function engineServer() {
  const state = { status: 200, probes: 0, metricsReads: 0, running: 0, waiting: 0, tokens: 0, metricsStatus: 200 };
  const server = createServer((req, res) => {
    if (req.url === '/metrics') {
      state.metricsReads++;
      res.writeHead(state.metricsStatus, { 'content-type': 'text/plain' });
      res.end(
        `# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} ${state.running}\nvllm:num_requests_waiting{model_name="m"} ${state.waiting}\nvllm:generation_tokens_total{model_name="m"} ${state.tokens}\n`,
      );
      return;
    }
    state.probes++;
    res.writeHead(state.status).end();
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { state, baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

const stall = (stallTimeoutMs: number) => ({
  runningGauges: ['vllm:num_requests_running'],
  progressCounters: ['vllm:generation_tokens_total'],
  inFlightGauges: ['vllm:num_requests_running', 'vllm:num_requests_waiting'],
  stallTimeoutMs,
});

function watch(baseUrl: string, opts: { stallTimeoutMs?: number; intervalMs?: number; owner?: () => PortOwner } = {}) {
  const ac = new AbortController();
  aborts.push(ac);
  const verdicts: HealthVerdict[] = [];
  const loads: EngineLoad[] = [];
  watchHealth({
    baseUrl,
    intervalMs: opts.intervalMs ?? 50,
    signal: ac.signal,
    portOwner: opts.owner ? async () => (opts.owner as () => PortOwner)() : undefined,
    stall: opts.stallTimeoutMs === undefined ? undefined : stall(opts.stallTimeoutMs),
    onVerdict: (v) => verdicts.push(v),
    onLoad: (l) => loads.push(l),
  });
  return { verdicts, loads, ac, last: () => verdicts.at(-1) };
}

describe('watchHealth', () => {
  it(`calls an engine unhealthy after ${UNHEALTHY_AFTER_FAILURES} failed probes in a row, and healthy again when it answers`, async () => {
    const { state, baseUrl } = await engineServer();
    const w = watch(baseUrl);
    await until(() => w.verdicts.length >= 3, 'three verdicts');
    expect(w.verdicts.every((v) => v.healthy)).toBe(true);
    state.status = 503;
    await until(() => w.last()?.healthy === false, 'the unhealthy verdict');
    expect(w.last()).toMatchObject({ cause: 'probes', why: expect.stringMatching(/^3 health probes failed in a row: GET \/health answered 503$/) });
    // Two misses are noise: the verdicts right after the first 503s stayed healthy.
    const firstBad = w.verdicts.findIndex((v) => !v.healthy);
    expect(w.verdicts.slice(firstBad - 2, firstBad).every((v) => v.healthy)).toBe(true);
    state.status = 200;
    await until(() => w.last()?.healthy === true, 'the healthy-again verdict');
    expect(w.last()?.why).toBe('/health answers again');
  });

  it('calls an engine with requests running and a flat token counter stalled, and healthy again when tokens move', async () => {
    const { state, baseUrl } = await engineServer();
    state.running = 3;
    state.tokens = 100;
    const w = watch(baseUrl, { stallTimeoutMs: 300 });
    await until(() => w.last()?.cause === 'stalled', 'the stalled verdict');
    expect(w.last()?.healthy).toBe(false);
    expect(w.last()?.why).toMatch(/^stalled: 3 requests running, no token generated for \d+ s$/);
    state.tokens = 101;
    await until(() => w.last()?.healthy === true, 'the generating-again verdict');
    expect(w.last()?.why).toMatch(/^generating again \(3 requests running, tokens generated\)$/);
  });

  it('never calls an idle engine stalled, however long its counter is flat', async () => {
    const { state, baseUrl } = await engineServer();
    state.tokens = 7;
    const w = watch(baseUrl, { stallTimeoutMs: 100 });
    await until(() => state.metricsReads >= 10, 'ten metrics reads');
    expect(w.verdicts.every((v) => v.healthy)).toBe(true);
  });

  it('keeps a stalled verdict through a failed metrics read rather than calling the engine healthy', async () => {
    const { state, baseUrl } = await engineServer();
    state.running = 2;
    const w = watch(baseUrl, { stallTimeoutMs: 200 });
    await until(() => w.last()?.cause === 'stalled', 'the stalled verdict');
    state.metricsStatus = 500;
    const reads = state.metricsReads;
    await until(() => state.metricsReads >= reads + 3, 'three failed metrics reads');
    expect(w.last()?.cause).toBe('stalled');
  });

  it('reads no metrics when stall detection is off (stall_timeout 0s)', async () => {
    const { state, baseUrl } = await engineServer();
    state.running = 3;
    const w = watch(baseUrl, { stallTimeoutMs: 0 });
    await until(() => state.probes >= 5, 'five probes');
    expect(state.metricsReads).toBe(0);
    expect(w.verdicts.every((v) => v.healthy)).toBe(true);
  });

  it('tells the load each tick from the metrics read stall detection makes: in flight, and the token rate once two reads were made', async () => {
    const { state, baseUrl } = await engineServer();
    state.running = 2;
    state.waiting = 1;
    const w = watch(baseUrl, { stallTimeoutMs: 60_000 });
    await until(() => w.loads.length >= 1, 'a first load');
    expect(w.loads[0]).toEqual({ inFlight: 3, tokensPerSecond: undefined });
    const grow = setInterval(() => {
      state.tokens += 10;
    }, 5);
    try {
      await until(() => (w.loads.at(-1)?.tokensPerSecond ?? 0) > 0, 'a token rate above 0');
    } finally {
      clearInterval(grow);
    }
    // One load per verdict, and no more metrics reads than stall detection makes.
    expect(w.loads.length).toBe(w.verdicts.length);
    expect(state.metricsReads).toBeLessThanOrEqual(w.verdicts.length + 1);
    state.metricsStatus = 500;
    await until(() => w.loads.at(-1)?.inFlight === undefined, 'unknown after a failed read');
    expect(w.loads.at(-1)).toEqual({ inFlight: undefined, tokensPerSecond: undefined });
  });

  it("reports SGLang's token rate from its decode tokens alone, while prefill and cache hits still count as progress (N7)", async () => {
    const t = { decode: 5, compute: 0, cache: 0, reads: 0 };
    const server = createServer((req, res) => {
      if (req.url !== '/metrics') return void res.writeHead(200).end();
      t.reads++;
      const l = 'model_name="m",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0"';
      res.writeHead(200, { 'content-type': 'text/plain' }).end(
        `sglang:num_running_reqs{${l}} 1.0\nsglang:num_queue_reqs{${l}} 0.0\nsglang:num_requests_total{${l}} 0.0\n` +
          `sglang:realtime_tokens_total{${l},mode="prefill_compute"} ${t.compute}.0\nsglang:realtime_tokens_total{${l},mode="prefill_cache"} ${t.cache}.0\nsglang:realtime_tokens_total{${l},mode="decode"} ${t.decode}.0\n`,
      );
    });
    servers.push(server);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const ac = new AbortController();
    aborts.push(ac);
    const verdicts: HealthVerdict[] = [];
    const loads: EngineLoad[] = [];
    watchHealth({
      baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      intervalMs: 50,
      signal: ac.signal,
      stall: { ...SGLANG_METRICS, stallTimeoutMs: 150 },
      onVerdict: (v) => verdicts.push(v),
      onLoad: (l) => loads.push(l),
    });
    // Prompt tokens computed and served from the cache grow; no token is decoded.
    const prefill = setInterval(() => {
      t.compute += 100;
      t.cache += 1000;
    }, 5);
    try {
      await until(() => t.reads >= 10, 'ten metrics reads, past the stall timeout');
      const rates = loads.map((l) => l.tokensPerSecond).filter((r) => r !== undefined);
      expect(rates.length).toBeGreaterThan(0);
      expect(new Set(rates)).toEqual(new Set([0]));
      expect(verdicts.every((v) => v.healthy)).toBe(true);
      t.decode += 50;
      await until(() => (loads.at(-1)?.tokensPerSecond ?? 0) > 0, 'a decode rate above 0');
    } finally {
      clearInterval(prefill);
    }
  });

  it('tells an unknown load when stall detection is off, since then nothing reads /metrics', async () => {
    const { state, baseUrl } = await engineServer();
    state.running = 3;
    const w = watch(baseUrl, { stallTimeoutMs: 0 });
    await until(() => w.loads.length >= 3, 'three ticks');
    expect(w.loads.every((l) => l.inFlight === undefined && l.tokensPerSecond === undefined)).toBe(true);
    expect(state.metricsReads).toBe(0);
  });

  it('stops probing when its signal aborts', async () => {
    const { state, baseUrl } = await engineServer();
    const w = watch(baseUrl);
    await until(() => state.probes >= 2, 'two probes');
    w.ac.abort();
    await new Promise((r) => setTimeout(r, 150));
    const after = state.probes;
    await new Promise((r) => setTimeout(r, 300));
    expect(state.probes).toBe(after);
  });

  it('probes an UNHEALTHY engine every 50 ms, so its recovery is seen at once, and a healthy one at its interval', async () => {
    const { state, baseUrl } = await engineServer();
    state.status = 503;
    // 400 ms apart: the three misses take a little over a second.
    const w = watch(baseUrl, { intervalMs: 400 });
    await until(() => w.last()?.healthy === false, 'the unhealthy verdict');
    // Twenty probes at the 400 ms interval would take 8 s, beyond this wait's limit; at 50 ms, one second.
    const atUnhealthy = state.probes;
    await until(() => state.probes >= atUnhealthy + 20, 'twenty more probes while unhealthy', 5000);
    state.status = 200;
    await until(() => w.last()?.healthy === true, 'the healthy-again verdict');
    // Healthy again: back to the interval, so 1.2 s see at most four probes.
    const atHealthy = state.probes;
    await new Promise((r) => setTimeout(r, 1200));
    expect(state.probes - atHealthy).toBeLessThanOrEqual(4);
  });

  it('never probes a port held by another process: that is a failed probe, with the squatter named', async () => {
    const { state, baseUrl } = await engineServer();
    let owner: PortOwner = { owner: 'other', pid: 4242, uid: 65534, reason: 'port 1 held by another process (pid 4242, uid 65534)' };
    const w = watch(baseUrl, { owner: () => owner });
    await until(() => w.last()?.healthy === false, 'the unhealthy verdict');
    expect(w.last()?.why).toBe('3 health probes failed in a row: port 1 held by another process (pid 4242, uid 65534)');
    expect(state.probes).toBe(0);
    owner = { owner: 'engine' };
    await until(() => w.last()?.healthy === true, 'the healthy-again verdict');
    expect(state.probes).toBeGreaterThan(0);
  });
});

describe("the sleep gauge read across the agent's own sleep or wake (issue 51)", () => {
  /** An engine whose /metrics says it is asleep (the awake series 0), and a hook run as each read is answered. */
  async function sleepyEngine(onRead: () => void) {
    const server = createServer((req, res) => {
      if (req.url === '/metrics') {
        onRead();
        res.writeHead(200, { 'content-type': 'text/plain' }).end('vllm:engine_sleep_state{engine="0",sleep_state="awake"} 0\n');
        return;
      }
      res.writeHead(200).end();
    });
    servers.push(server);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  }

  function watchSleep(baseUrl: string, sleeping: () => boolean) {
    const ac = new AbortController();
    aborts.push(ac);
    const verdicts: HealthVerdict[] = [];
    watchHealth({ baseUrl, intervalMs: 30, signal: ac.signal, sleepGauge: 'vllm:engine_sleep_state{engine="0",sleep_state="awake"}', sleeping, onVerdict: (v) => verdicts.push(v) });
    return verdicts;
  }

  it('is no sign of an unasked sleep while the agent has the engine asleep, nor when the agent put it to sleep during the read; asleep with the agent awake is', async () => {
    // The agent sleeps the engine from the first read on: read as it began READY, answered once SLEEPING.
    let agentSleeping = false;
    let reads = 0;
    const during = watchSleep(
      await sleepyEngine(() => {
        reads++;
        agentSleeping = true;
      }),
      () => agentSleeping,
    );
    await until(() => during.length >= 5, 'five verdicts');
    expect(reads).toBe(1);
    expect(during.filter((v) => v.cause === 'asleep')).toEqual([]);
    // The look-alike: the engine asleep while the agent has it awake: someone else called its /sleep.
    const unasked = watchSleep(await sleepyEngine(() => undefined), () => false);
    await until(() => unasked.length >= 1, 'a verdict');
    expect(unasked[0]).toMatchObject({ healthy: false, cause: 'asleep' });
  });
});
