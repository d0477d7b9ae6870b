import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { askKnownAnswer, checkKnownAnswer, isDegenerate, KNOWN_PROMPT, type KnownAnswerTarget, sameAnswer } from '../../../../src/agent/supervisor/probes/known-answer.js';
import { checkUntilAnswered, KNOWN_ANSWER_RETRY, knownAnswerRetry, type NotObtained } from '../../../../src/agent/supervisor/probes/known-answer-retry.js';
import { freePort } from '../../../helpers/engine-processes.js';

const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(
    servers.splice(0).map((s) => {
      s.closeAllConnections();
      return new Promise((r) => s.close(r));
    }),
  );
});

interface Seen {
  body: Record<string, unknown>;
  auth: string | undefined;
  rank: string | undefined;
}

type Reply = { status: number; json: unknown } | 'hold' | 'reset';

/** An engine's /v1/completions answering `answer(body, n)` (n: the ask's number, from 0); records what it was asked. */
async function engine(answer: (body: Record<string, unknown>, n: number, rank: string | undefined) => Reply): Promise<{ baseUrl: string; seen: Seen[] }> {
  const seen: Seen[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let text = '';
    req.on('data', (c) => (text += c));
    req.on('end', () => {
      const body = JSON.parse(text) as Record<string, unknown>;
      const rank = req.headers['x-data-parallel-rank'] as string | undefined;
      seen.push({ body, auth: req.headers.authorization, rank });
      const a = answer(body, seen.length - 1, rank);
      if (a === 'hold') return; // queued behind what the engine runs first: no answer yet
      if (a === 'reset') {
        req.socket.destroy();
        return;
      }
      res.writeHead(a.status, { 'content-type': 'application/json' }).end(JSON.stringify(a.json));
    });
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as { port: number };
  return { baseUrl: `http://127.0.0.1:${port}`, seen };
}

/** vLLM's completion body (V:vllm/entrypoints/openai/completion/serving.py:647-728): the first token and the top ones at the first position. */
const completion = (text: string, first?: string, top?: Record<string, number>): Reply => ({
  status: 200,
  json: { choices: [{ index: 0, text, logprobs: first ? { tokens: [first], token_logprobs: [-0.1], top_logprobs: [top ?? { [first]: -0.1 }], text_offset: [0] } : null, finish_reason: 'length' }] },
});
const busy = (status: number, message: string): Reply => ({ status, json: { object: 'error', message, type: 'ServiceUnavailableError', code: status } });

const target = (baseUrl: string, more: Partial<KnownAnswerTarget> = {}): KnownAnswerTarget => ({ baseUrl, model: 'm', apiKey: 'k1', signal: new AbortController().signal, ...more });
const RECORDED = { text: ' 9, 10, 11, 12', token: 'token_id:24' };

describe('the known-answer judgement', () => {
  it('compares the first words only: late tokens may drift under batching', () => {
    expect(sameAnswer(' 9, 10, 11, 12, 13', ' 9, 10, 11, twelve')).toBe(true);
    expect(sameAnswer(' 9, 10, 11, 12', '9,  10,\n11, 12')).toBe(true);
    expect(sameAnswer(' 9, 10, 11, 12', ' 9, 10, 12, 11')).toBe(false);
    expect(sameAnswer(' 9, 10, 11', '!!!!!!!!')).toBe(false);
    expect(sameAnswer('', '')).toBe(true);
    expect(sameAnswer('', '!!')).toBe(false);
  });

  it('calls one character repeated garbage, and nothing else', () => {
    expect(isDegenerate('!!!!!!!!')).toBe(true);
    expect(isDegenerate('! ! ! !')).toBe(true);
    expect(isDegenerate(' 9, 10, 11')).toBe(false);
    expect(isDegenerate('!')).toBe(false);
  });
});

describe('asking the engine', () => {
  it('asks a short completion of the known prompt with its sampling pinned, its top 5 and the engine key (E15)', async () => {
    const e = await engine(() => completion(' 9, 10, 11, 12', ' 9'));
    const asked = await askKnownAnswer(target(e.baseUrl));
    expect(asked).toEqual({ ok: true, text: ' 9, 10, 11, 12', token: ' 9', top: [' 9'] });
    expect(e.seen[0]?.body).toEqual({ model: 'm', prompt: KNOWN_PROMPT, max_tokens: 4, temperature: 0, repetition_penalty: 1, top_k: -1, top_p: 1, min_p: 0, seed: 0, stream: false, logprobs: 5 });
    expect(e.seen[0]?.auth).toBe('Bearer k1');
    expect(e.seen[0]?.rank).toBeUndefined();
  });

  it('asks vLLM for token ids, and sends a priority only when the engine schedules by it', async () => {
    const e = await engine(() => completion(' 9', 'token_id:24'));
    await askKnownAnswer(target(e.baseUrl, { ask: { tokenIds: true, priority: -1_000_000 } }));
    expect(e.seen[0]?.body).toMatchObject({ return_tokens_as_token_ids: true, priority: -1_000_000 });
    await askKnownAnswer(target(e.baseUrl, { ask: {} }));
    expect(e.seen[1]?.body).not.toHaveProperty('priority');
    expect(e.seen[1]?.body).not.toHaveProperty('return_tokens_as_token_ids');
  });

  it('says why when the engine gives no answer', async () => {
    const e = await engine(() => ({ status: 404, json: { message: 'no completions here' } }));
    const asked = await askKnownAnswer(target(e.baseUrl));
    expect(asked.ok).toBe(false);
    expect(!asked.ok && asked.reason).toMatch(/answered 404: .*no completions here/);
  });
});

describe('checking the answer', () => {
  it('passes a woken engine that gives its recorded answer, in one ask', async () => {
    const e = await engine(() => completion(' 9, 10, 11, 13', 'token_id:24'));
    const v = await checkKnownAnswer(target(e.baseUrl), RECORDED);
    expect(v.kind).toBe('same');
    expect(e.seen).toHaveLength(1);
  });

  it('true positive: an engine answering garbage differs, naming both answers', async () => {
    const e = await engine(() => completion('!!!!!!!!', 'token_id:0', { 'token_id:0': -0.01, 'token_id:1': -5 }));
    const v = await checkKnownAnswer(target(e.baseUrl), RECORDED);
    expect(v.kind).toBe('differs');
    expect(v.kind === 'differs' && v.reason).toBe(`it answers "!!!!!!!!" to "${KNOWN_PROMPT}", where it answered "9, 10, 11, 12" before`);
  });

  it('passes a near tie at the first token by token id: the recorded id among the top 5 (E15; the decoded-string fallback failed it)', async () => {
    const e = await engine(() => completion(' nine, ten', 'token_id:77', { 'token_id:77': -0.69, 'token_id:24': -0.7, 'token_id:3': -4 }));
    const v = await checkKnownAnswer(target(e.baseUrl, { ask: { tokenIds: true } }), RECORDED);
    expect(v).toEqual({ kind: 'same', how: 'its known first token "token_id:24" is among its top 5 first tokens' });
  });

  it('innocent look-alike of a near tie: another id whose text would begin the recorded word still differs', async () => {
    // "token_id:9" begins nothing; a decoded " 9" would, which is why ids are compared, not strings.
    const e = await engine(() => completion(' nine, ten', 'token_id:77', { 'token_id:77': -0.69, 'token_id:9': -0.7 }));
    expect((await checkKnownAnswer(target(e.baseUrl), RECORDED)).kind).toBe('differs');
  });

  it('keeps the decoded-word fallback for a record of an older agent (no token), and for SGLang whose top logprobs are keyed by text', async () => {
    const e = await engine(() => completion(' nine, ten', ' nine', { ' nine': -0.69, ' 9': -0.7 }));
    expect((await checkKnownAnswer(target(e.baseUrl), { text: ' 9, 10, 11' })).kind).toBe('same');
    expect((await checkKnownAnswer(target(e.baseUrl), { text: ' 9, 10, 11', token: ' 9' })).kind).toBe('same');
    expect((await checkKnownAnswer(target(e.baseUrl), { text: ' 9, 10, 11', token: ' 8' })).kind).toBe('differs');
  });

  it('without a recorded answer, rules out garbage only', async () => {
    const good = await engine(() => completion(' 9, 10'));
    expect((await checkKnownAnswer(target(good.baseUrl), undefined)).kind).toBe('same');
    const bad = await engine(() => completion('!!!!!!!!'));
    expect((await checkKnownAnswer(target(bad.baseUrl), undefined)).kind).toBe('differs');
  });
});

describe('a failed ask is no answer (E2)', () => {
  const notObtained = async (t: KnownAnswerTarget, reason: RegExp) => {
    const v = await checkKnownAnswer(t, RECORDED);
    expect(v.kind).toBe('not-obtained');
    expect(v.kind === 'not-obtained' && v.reason).toMatch(reason);
  };

  it('an answer later than the ask waits (queued behind held requests) is not obtained, not wrong', async () => {
    const e = await engine(() => 'hold');
    await notObtained(target(e.baseUrl, { timeoutMs: 300 }), /^POST \/v1\/completions: no answer in 300 ms$/);
  });

  it('429 and 503 (an engine at its limits: SGLang --max-queued-requests) are not obtained', async () => {
    const e = await engine((_b, n) => (n === 0 ? busy(503, 'The request queue is full.') : busy(429, 'Too many requests')));
    await notObtained(target(e.baseUrl), /answered 503: .*The request queue is full/);
    await notObtained(target(e.baseUrl), /answered 429: /);
  });

  it('a refused and a reset connection are not obtained', async () => {
    await notObtained(target(`http://127.0.0.1:${await freePort()}`), /ECONNREFUSED/);
    const e = await engine(() => 'reset');
    await notObtained(target(e.baseUrl), /socket hang up|ECONNRESET/);
  });

  it('asks again with backoff until an answer comes, with a longer limit each time: the right one is the same', async () => {
    const e = await engine((_b, n) => (n === 0 ? 'hold' : n === 1 ? busy(503, 'busy') : completion(' 9, 10, 11, 12', 'token_id:24')));
    const seen: NotObtained[] = [];
    const policy = { firstDelayMs: 10, maxDelayMs: 40, firstTimeoutMs: 200, maxTimeoutMs: 10_000 };
    const v = await checkUntilAnswered(target(e.baseUrl), RECORDED, (n) => seen.push(n), policy);
    expect(v.kind).toBe('same');
    expect(seen.map((n) => [n.attempt, n.nextInMs])).toEqual([
      [1, 10],
      [2, 20],
    ]);
    expect(seen[0]?.reason).toMatch(/no answer in 200 ms/);
    expect(seen[1]?.reason).toMatch(/answered 503/);
  });

  it('without a policy the first ask waits the target\'s own limit (supervisor.known_answer_timeout), not 30 s', async () => {
    const e = await engine((_b, n) => (n === 0 ? 'hold' : completion(' 9, 10, 11, 12', 'token_id:24')));
    const seen: NotObtained[] = [];
    // Were the limit 30 s, the held ask would outlast the test's own timeout.
    const v = await checkUntilAnswered(target(e.baseUrl, { timeoutMs: 150 }), RECORDED, (n) => seen.push(n));
    expect(v.kind).toBe('same');
    expect(seen).toEqual([{ attempt: 1, nextInMs: 1000, reason: expect.stringMatching(/no answer in 150 ms$/) }]);
  }, 10_000);

  it('every limit of the retry policy scales with the first, the pauses do not; 30 s is the default as before', () => {
    expect(KNOWN_ANSWER_RETRY).toEqual({ firstDelayMs: 1000, maxDelayMs: 30_000, firstTimeoutMs: 30_000, maxTimeoutMs: 600_000 });
    expect(knownAnswerRetry(5000)).toEqual({ firstDelayMs: 1000, maxDelayMs: 30_000, firstTimeoutMs: 5000, maxTimeoutMs: 100_000 });
    expect(knownAnswerRetry(120_000)).toEqual({ firstDelayMs: 1000, maxDelayMs: 30_000, firstTimeoutMs: 120_000, maxTimeoutMs: 2_400_000 });
  });

  it('true positive after failed asks: when the answer finally comes and differs, it differs', async () => {
    const e = await engine((_b, n) => (n < 2 ? busy(503, 'busy') : completion('!!!!', 'token_id:0')));
    const v = await checkUntilAnswered(target(e.baseUrl), RECORDED, () => {}, { firstDelayMs: 5, maxDelayMs: 5, firstTimeoutMs: 1000, maxTimeoutMs: 1000 });
    expect(v.kind).toBe('differs');
    expect(e.seen).toHaveLength(3);
  });

  it('stops asking when its signal aborts', async () => {
    const e = await engine(() => busy(503, 'busy'));
    const stop = new AbortController();
    const asked = checkUntilAnswered(target(e.baseUrl, { signal: stop.signal }), RECORDED, () => stop.abort(), { firstDelayMs: 60_000, maxDelayMs: 60_000, firstTimeoutMs: 1000, maxTimeoutMs: 1000 });
    await expect(asked).rejects.toThrow();
    expect(e.seen).toHaveLength(1);
  });
});

describe('every DP rank is asked (E15)', () => {
  it('asks each rank by X-data-parallel-rank and passes when every one gives the answer', async () => {
    const e = await engine(() => completion(' 9, 10, 11, 12', 'token_id:24'));
    const v = await checkKnownAnswer(target(e.baseUrl, { ask: { dpRanks: 2 } }), RECORDED);
    expect(v).toEqual({ kind: 'same', how: 'gives its known answer "9, 10, 11," on each of its 2 DP ranks' });
    expect(e.seen.map((s) => s.rank).sort()).toEqual(['0', '1']);
  });

  it('true positive: one rank on garbage differs, naming the rank', async () => {
    const e = await engine((_b, _n, rank) => (rank === '1' ? completion('!!!!', 'token_id:0') : completion(' 9, 10, 11, 12', 'token_id:24')));
    const v = await checkKnownAnswer(target(e.baseUrl, { ask: { dpRanks: 2 } }), RECORDED);
    expect(v.kind === 'differs' && v.reason).toMatch(/^DP rank 1 answers "!!!!"/);
  });

  it('a rank that does not answer leaves the verdict not obtained', async () => {
    const e = await engine((_b, _n, rank) => (rank === '1' ? busy(503, 'busy') : completion(' 9, 10, 11, 12', 'token_id:24')));
    const v = await checkKnownAnswer(target(e.baseUrl, { ask: { dpRanks: 2 } }), RECORDED);
    expect(v.kind === 'not-obtained' && v.reason).toMatch(/^POST \/v1\/completions \(DP rank 1\) answered 503/);
  });
});
