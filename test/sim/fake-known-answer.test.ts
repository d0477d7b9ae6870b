import { describe, it, type TestContext } from 'vitest';
import { freePort, until } from '../helpers/engine-processes.js';
import { FAKE_SGLANG, FAKE_VLLM, fakeEnginesOf, outputMatches } from '../helpers/fake-engines.js';

/*
 * The doubles as unkind as the engines to the known answer (review
 * engine-fidelity-3 §3 D3, E2, E15): completions queue behind what a woken
 * engine held (--sim-wake-queue-delay), a priority moves a request ahead of
 * those waiting under vLLM's priority policy, SGLang refuses past
 * --max-queued-requests with a 503, a DP rank out of range is a 400, and a
 * plain completion returns its top logprobs, keyed by token id when vLLM is
 * asked.
 *
 * The tests run side by side (describe.concurrent): most of each is waiting on the doubles' timers.
 * Each kills only the doubles it started when it ends (fakeEnginesOf), and takes expect from its
 * context: vitest tracks no concurrent test in its globals.
 */

const post = (url: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });

async function vllm(ctx: TestContext, args: string[]) {
  const port = await freePort();
  const e = fakeEnginesOf(ctx)(FAKE_VLLM, ['serve', 'org/model', '--port', String(port), '--enable-sleep-mode', '--sim-wake-time', '10ms', ...args], { VLLM_SERVER_DEV_MODE: '1' });
  await outputMatches(e, /Application startup complete/);
  return { ...e, url: `http://127.0.0.1:${port}` };
}

async function sglang(ctx: TestContext, args: string[]) {
  const port = await freePort();
  const e = fakeEnginesOf(ctx)(FAKE_SGLANG, ['serve', '--model-path', 'org/model', '--port', String(port), ...args]);
  await outputMatches(e, /fired up and ready to roll/);
  return { ...e, url: `http://127.0.0.1:${port}` };
}

interface Logprobs {
  tokens: string[];
  top_logprobs: Record<string, number>[];
}
/** A gauge of the double's /metrics, summed over its series. */
async function gauge(url: string, name: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return text
    .split('\n')
    .filter((l) => l.startsWith(`${name}{`) && !l.includes('priority="'))
    .reduce((n, l) => n + Number(l.split(' ').at(-1)), 0);
}
const waitingAtLeast = (url: string, name: string, n: number) => until(async () => (await gauge(url, name)) >= n, `${name} >= ${n}`);

const ask = async (url: string, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}) => {
  const res = await post(`${url}/v1/completions`, { prompt: '1, 2, 3,', max_tokens: 3, temperature: 0, ...extra }, headers);
  return { status: res.status, body: (await res.json()) as { choices: { text: string; logprobs: Logprobs | null }[]; message?: string } };
};

describe.concurrent('top logprobs', () => {
  it('vLLM returns the sampled token and the best others at each position, by text, or as token_id:N when asked', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx, []);
    const plain = await ask(e.url);
    expect(plain.body.choices[0]?.logprobs).toBeNull();
    const byText = (await ask(e.url, { logprobs: 5 })).body.choices[0]?.logprobs as Logprobs;
    expect(byText.tokens).toEqual(['the', ' model', ' is']);
    expect(Object.keys(byText.top_logprobs[0] ?? {})).toHaveLength(5);
    expect(Object.keys(byText.top_logprobs[0] ?? {})[0]).toBe('the');
    const byId = (await ask(e.url, { logprobs: 5, return_tokens_as_token_ids: true })).body.choices[0];
    expect(byId?.text).toBe('the model is');
    expect(byId?.logprobs?.tokens).toEqual(['token_id:1000', 'token_id:1001', 'token_id:1002']);
    expect(Object.keys(byId?.logprobs?.top_logprobs[0] ?? {})).toEqual(['token_id:1000', 'token_id:1001', 'token_id:1002', 'token_id:1003', 'token_id:1004']);
  });

  it('SGLang keys them by text whatever is asked (its OpenAI route has no token-id field)', async (ctx) => {
    const { expect } = ctx;
    const e = await sglang(ctx, []);
    const lp = (await ask(e.url, { logprobs: 5, return_tokens_as_token_ids: true })).body.choices[0]?.logprobs as Logprobs;
    expect(lp.tokens).toEqual(['the', ' model', ' is']);
  });
});

describe.concurrent('completions queued behind what a woken engine held', () => {
  it('vLLM: a completion asked while asleep, or just after the wake, answers only once the held work is done', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx, ['--sim-wake-queue-delay', '1500ms']);
    expect((await post(`${e.url}/sleep?level=1`, {})).status).toBe(200);
    const held = ask(e.url);
    await waitingAtLeast(e.url, 'vllm:num_requests_waiting', 1);
    // Taken before the wake is asked: the delay's timer starts after it, so no answer can come sooner.
    const woke = Date.now();
    expect((await post(`${e.url}/wake_up`, {})).status).toBe(200);
    const after = ask(e.url);
    const [h, a] = await Promise.all([held.then((r) => ({ ...r, ms: Date.now() - woke })), after.then((r) => ({ ...r, ms: Date.now() - woke }))]);
    expect([h.status, a.status]).toEqual([200, 200]);
    expect(h.body.choices[0]?.text).toBe('the model is');
    // Nothing is admitted before the modelled delay ends (a timer, not a race).
    expect(h.ms).toBeGreaterThanOrEqual(1400);
    expect(a.ms).toBeGreaterThanOrEqual(1400);
  });

  it('SGLang: likewise after /continue_generation', async (ctx) => {
    const { expect } = ctx;
    const e = await sglang(ctx, ['--sim-wake-queue-delay', '1500ms']);
    expect((await post(`${e.url}/pause_generation`, { mode: 'abort' })).status).toBe(200);
    const held = ask(e.url);
    const resumed = Date.now();
    expect((await post(`${e.url}/continue_generation`, {})).status).toBe(200);
    const r = await held;
    expect(r.status).toBe(200);
    expect(Date.now() - resumed).toBeGreaterThanOrEqual(1400);
  });
});

describe.concurrent('where a request waits', () => {
  /** Finish order of a long request holding the one slot, then a plain one, then one of priority -10. */
  async function order(ctx: TestContext, policy: string[]): Promise<string[]> {
    const e = await vllm(ctx, ['--sim-max-running', '1', '--sim-token-latency', '40ms', ...policy]);
    const done: string[] = [];
    // Each sent once the one before it is seen where it should be: the long one running, the plain one waiting.
    const long = ask(e.url, { max_tokens: 60 }).then(() => done.push('long'));
    await until(async () => (await gauge(e.url, 'vllm:num_requests_running')) === 1, 'the long request running');
    const plain = ask(e.url).then(() => done.push('plain'));
    await waitingAtLeast(e.url, 'vllm:num_requests_waiting', 1);
    const urgent = ask(e.url, { priority: -10 }).then(() => done.push('urgent'));
    await Promise.all([long, plain, urgent]);
    return done;
  }

  it('vLLM FCFS: a priority changes nothing; under --scheduling-policy priority the lower value goes first among those waiting, never ahead of the running one', async (ctx) => {
    const { expect } = ctx;
    expect(await order(ctx, [])).toEqual(['long', 'plain', 'urgent']);
    expect(await order(ctx, ['--scheduling-policy', 'priority'])).toEqual(['long', 'urgent', 'plain']);
  });

  it('SGLang --max-queued-requests: one more than the queue holds is refused 503 "The request queue is full."', async (ctx) => {
    const { expect } = ctx;
    const e = await sglang(ctx, ['--max-queued-requests', '1', '--sim-max-running', '1', '--sim-token-latency', '50ms', '--enable-metrics', '--decode-log-interval', '1']);
    const running = ask(e.url, { max_tokens: 100 });
    const waiting = ask(e.url, { max_tokens: 2 });
    await waitingAtLeast(e.url, 'sglang:num_queue_reqs', 1);
    const refused = await ask(e.url);
    expect(refused.status).toBe(503);
    expect(JSON.stringify(refused.body)).toContain('The request queue is full.');
    expect((await running).status).toBe(200);
    expect((await waiting).status).toBe(200);
  });

  it('vLLM DP: X-data-parallel-rank within [0, dp) is served, outside it a 400', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx, ['--data-parallel-size', '2', '--api-server-count', '1']);
    expect((await ask(e.url, {}, { 'X-data-parallel-rank': '1' })).status).toBe(200);
    const out = await ask(e.url, {}, { 'X-data-parallel-rank': '2' });
    expect(out.status).toBe(400);
    expect(out.body.message).toBe('data_parallel_rank 2 is out of range [0, 2).');
  });
});
