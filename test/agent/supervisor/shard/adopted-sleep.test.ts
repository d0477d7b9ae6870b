import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { VLLM_SLEEP_API } from '../../../../src/agent/engines/vllm/vllm-sleep.js';
import { SGLANG_SLEEP_API } from '../../../../src/agent/engines/sglang/sglang-sleep.js';
import { askAsleep, type FoundSleep, judgeAdoptedSleep } from '../../../../src/agent/supervisor/shard/adopted-sleep.js';

/*
 * What an adopted engine says of its sleep (adopted-sleep.ts), asked of a
 * real HTTP server speaking vLLM's /is_sleeping and engine_sleep_state
 * (V:vllm/entrypoints/serve/dev/sleep/api_router.py:45-48;
 * V:vllm/v1/metrics/loggers.py:1261-1278 at 2f41c894), and judged against
 * the state file's record.
 */

let server: Server | undefined;
afterEach(async () => {
  server?.closeAllConnections();
  await new Promise((r) => server?.close(r) ?? r(undefined));
  server = undefined;
});

/** The gauge lines vLLM exports after record_sleep_state(sleep, level). */
function gauges(awake: number, offloaded: number, discarded: number): string {
  const line = (state: string, v: number) => `vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="${state}"} ${v.toFixed(1)}\n`;
  return `# TYPE vllm:engine_sleep_state gauge\n${line('awake', awake)}${line('weights_offloaded', offloaded)}${line('discard_all', discarded)}`;
}

/** An engine answering /is_sleeping with `body` (after `delayMs`; never when `hang`) and /metrics with `metrics`; resolves with its base URL. */
async function engine(o: { status?: number; body: string; metrics?: string; delayMs?: number; hang?: boolean }): Promise<string> {
  const s = createServer((req, res) => {
    if (req.url === '/metrics') return void res.end(o.metrics ?? '');
    if (req.url !== '/is_sleeping') return void res.writeHead(404).end('{"detail":"Not Found"}');
    if (o.hang) return;
    setTimeout(() => res.writeHead(o.status ?? 200, { 'content-type': 'application/json' }).end(o.body), o.delayMs ?? 0);
  });
  server = s;
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
}

const ask = (baseUrl: string, timeoutMs?: number) => askAsleep({ baseUrl, api: VLLM_SLEEP_API, apiKey: '', signal: new AbortController().signal, ...(timeoutMs ? { timeoutMs } : {}) });

describe('asking an adopted engine whether it sleeps', () => {
  it('reads asleep and its level from the engine_sleep_state gauges: discard_all is 2, weights_offloaded is 1', async () => {
    expect(await ask(await engine({ body: '{"is_sleeping": true}', metrics: gauges(0, 0, 1) }))).toEqual({ asleep: true, level: 2 });
    await new Promise((r) => server?.close(r));
    expect(await ask(await engine({ body: '{"is_sleeping": true}', metrics: gauges(0, 1, 0) }))).toEqual({ asleep: true, level: 1 });
  });

  it('reads asleep without a level after a partial wake, whose gauges say awake (async_llm.py:979-983), and awake as awake', async () => {
    expect(await ask(await engine({ body: '{"is_sleeping": true}', metrics: gauges(1, 0, 0) }))).toEqual({ asleep: true });
    await new Promise((r) => server?.close(r));
    expect(await ask(await engine({ body: '{"is_sleeping": false}', metrics: gauges(0, 1, 0) }))).toEqual({ asleep: false });
  });

  it('waits for an engine that answers late, busy with a wake still running (its utility calls are answered in order, core.py:1417-1446)', async () => {
    expect(await ask(await engine({ body: '{"is_sleeping": false}', delayMs: 300 }), 10_000)).toEqual({ asleep: false });
  });

  it('says it does not know, never asleep or awake, for no answer in time, a refusal, an answer that is not one, or no listener', async () => {
    const unknown = (f: FoundSleep) => expect('unknown' in f, JSON.stringify(f)).toBe(true);
    unknown(await ask(await engine({ body: '', hang: true }), 300));
    await new Promise((r) => server?.close(r));
    unknown(await ask(await engine({ status: 404, body: '{"detail":"Not Found"}' })));
    await new Promise((r) => server?.close(r));
    unknown(await ask(await engine({ body: '{"sleeping": 1}' })));
    await new Promise((r) => server?.close(r));
    unknown(await ask(await engine({ body: '<html>' })));
    const gone = server?.address() as AddressInfo;
    await new Promise((r) => server?.close(r));
    server = undefined;
    unknown(await ask(`http://127.0.0.1:${gone.port}`));
    // SGLang has no such query: its record is trusted.
    unknown(await askAsleep({ baseUrl: 'http://127.0.0.1:1', api: SGLANG_SLEEP_API, apiKey: '', signal: new AbortController().signal }));
  });
});

describe('judging the answer against the record', () => {
  it('takes the engine over its record when they differ, and the record when they agree or the engine does not say', () => {
    // Recorded awake, asleep (a sleep the file never took): asleep at its gauged level, else 2, whose wake brings back either.
    expect(judgeAdoptedSleep(undefined, { asleep: true, level: 1 })).toMatchObject({ kind: 'asleep', level: 1 });
    expect(judgeAdoptedSleep(0, { asleep: true })).toMatchObject({ kind: 'asleep', level: 2 });
    // Recorded asleep, awake (a wake that finished after the agent stopped).
    expect(judgeAdoptedSleep(1, { asleep: false })).toMatchObject({ kind: 'awake' });
    expect(judgeAdoptedSleep(2, { asleep: false })).toMatchObject({ kind: 'awake' });
    // Agreeing: the record stands, its level included (a level-2 wake cut after the weights' call reads asleep with gauges at 0).
    expect(judgeAdoptedSleep(2, { asleep: true })).toEqual({ kind: 'as-recorded' });
    expect(judgeAdoptedSleep(1, { asleep: true, level: 2 })).toEqual({ kind: 'as-recorded' });
    expect(judgeAdoptedSleep(undefined, { asleep: false })).toEqual({ kind: 'as-recorded' });
    // No answer (busy past the bound, hung, no route): the record, and why.
    expect(judgeAdoptedSleep(1, { unknown: 'timed out' })).toMatchObject({ kind: 'as-recorded', why: expect.stringMatching(/did not say whether it sleeps \(timed out\)/) });
    expect(judgeAdoptedSleep(undefined, { unknown: 'timed out' })).toMatchObject({ kind: 'as-recorded' });
  });
});
