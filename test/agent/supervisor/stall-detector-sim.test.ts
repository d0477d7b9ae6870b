import { spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, it, type TestContext } from 'vitest';
import { SimEngine } from '../../../src/agent/engines/sim/sim-engine.js';
import { readCounters } from '../../../src/agent/supervisor/probes/read-gauge.js';
import { readGauges } from '../../../src/agent/supervisor/probes/read-gauge.js';
import { StallDetector, type StallVerdict } from '../../../src/agent/supervisor/probes/stall-detector.js';
import { freePort, groupMembers, until } from '../../helpers/engine-processes.js';
import { BIN } from '../../helpers/run-cli.js';

/*
 * The rule against a real engine process: the sim's /metrics sampled the way
 * the shard runner will (every health interval), through the series names the
 * engine class declares. Only the wiring into the shard runner is not here.
 *
 * The tests run side by side (describe.concurrent): each is mostly a watch
 * of a few seconds, which they now watch together. Each ends only its own
 * sim and requests (its context's onTestFinished), and takes expect from its
 * context: vitest tracks no concurrent test in its globals.
 */

const { metrics } = new SimEngine(undefined, 'lo');
async function startSim(ctx: TestContext, args: string[]): Promise<string> {
  const port = await freePort();
  const child = spawn(process.execPath, [BIN, 'sim', 'engine', '--port', String(port), '--model', 'm', ...args], {
    detached: true,
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  ctx.onTestFinished(async () => {
    try {
      process.kill(-(child.pid as number), 'SIGKILL');
    } catch {}
    await until(() => groupMembers(child.pid as number).length === 0, 'the sim to be gone', 10_000);
  });
  let out = '';
  child.stdout?.on('data', (c) => {
    out += c;
  });
  await until(() => /Uvicorn running/.test(out), 'the sim to listen');
  return `http://127.0.0.1:${port}`;
}

/** Keeps `n` streaming requests in flight until the test ends. */
function load(ctx: TestContext, url: string, n: number): void {
  for (let i = 0; i < n; i++) {
    const a = new AbortController();
    ctx.onTestFinished(() => a.abort());
    const body = JSON.stringify({ prompt: 'x', max_tokens: 100_000, stream: true });
    void fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body, signal: a.signal })
      .then((r) => r.text())
      .catch(() => undefined);
  }
}

/** Samples every `intervalMs` for `forMs`, or until stalled; returns the verdicts. */
async function watch(url: string, d: StallDetector, intervalMs: number, forMs: number): Promise<StallVerdict[]> {
  const verdicts: StallVerdict[] = [];
  const start = performance.now();
  while (performance.now() - start < forMs) {
    const text = await (await fetch(`${url}/metrics`)).text();
    const v = d.observe({
      atMs: performance.now(),
      requestsRunning: readGauges(text, metrics.runningGauges),
      progress: readCounters(text, metrics.progressCounters),
    });
    verdicts.push(v);
    if (v.state === 'stalled') break;
    await sleep(intervalMs);
  }
  return verdicts;
}

describe.concurrent('stall detection against the sim engine', () => {
  it('calls a sim under load that stalls after 2s stalled, with the requests running in the reason', async (ctx) => {
    const { expect } = ctx;
    const url = await startSim(ctx, ['--stall-after', '2s', '--token-latency', '20ms']);
    load(ctx, url, 3);
    const verdicts = await watch(url, new StallDetector({ stallTimeoutMs: 2000 }), 250, 30_000);
    expect(verdicts.some((v) => v.state === 'flowing' && v.reason.endsWith('tokens generated'))).toBe(true);
    expect(verdicts.at(-1)?.state).toBe('stalled');
    expect(verdicts.at(-1)?.reason).toMatch(/^stalled: 3 requests running, no token generated for [2-9] s$/);
    expect((await fetch(`${url}/health`)).status).toBe(200);
  });

  it('never alarms on an idle sim', async (ctx) => {
    const { expect } = ctx;
    const url = await startSim(ctx, []);
    const verdicts = await watch(url, new StallDetector({ stallTimeoutMs: 1000 }), 250, 4000);
    expect(verdicts.length).toBeGreaterThan(4);
    expect(new Set(verdicts.map((v) => v.state))).toEqual(new Set(['idle']));
  });

  it('never alarms on a slow sim that makes a token every 1.5 s', async (ctx) => {
    const { expect } = ctx;
    const url = await startSim(ctx, ['--token-latency', '1500ms']);
    load(ctx, url, 2);
    const verdicts = await watch(url, new StallDetector({ stallTimeoutMs: 4000 }), 250, 7000);
    expect(verdicts.filter((v) => v.state === 'flowing').length).toBeGreaterThan(4);
    expect(verdicts.filter((v) => v.state === 'stalled')).toEqual([]);
  });
});
