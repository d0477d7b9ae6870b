import { createServer, type Server } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { ShardState } from '../../../../src/gen/llmgw/v1/agent_pb.js';
import type { Answered } from '../../../../src/agent/supervisor/probes/known-answer.js';
import { type AnswerHost, ShardAnswers } from '../../../../src/agent/supervisor/shard/shard-answers.js';
import { nextShard, newShardLife, type ShardChange, type ShardLife } from '../../../../src/agent/supervisor/shard/shard-machine.js';
import type { StateFileWriter } from '../../../../src/agent/supervisor/shard/state-file-writer.js';
import type { Logger } from '../../../../src/lib/logger.js';
import { freePort, until } from '../../../helpers/engine-processes.js';

/*
 * What the shard makes of the known answer (review engine-fidelity-3 E2), on
 * the real machine (nextShard) against an engine on a real socket: a failed
 * ask (503, 429, refused) leaves the shard as it was with the reason and is
 * asked again until answered; only an answer received and different fails a
 * wake or marks the shard. At 10e6215 each of these failed asks was a wrong
 * answer: the wake FAILED, the periodic check UNHEALTHY (by reasoning: its
 * checkKnownAnswer returned {ok:false} for any failed ask, and its callers
 * took that as lost weights).
 */

const S = ShardState;
const RIGHT = ' the model is';
type Reply = { status: number; text?: string };

const servers: Server[] = [];
const stops: AbortController[] = [];
afterEach(async () => {
  for (const s of stops.splice(0)) s.abort();
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

/** An engine whose n-th completion (from 0) gets `reply(n)`; listening now, or on `port` when given later. */
async function engine(reply: (n: number) => Reply, port?: number): Promise<{ baseUrl: string; asked: () => number }> {
  let n = 0;
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const r = reply(n++);
      const body = r.text === undefined ? { object: 'error', message: `busy (${r.status})`, code: r.status } : { choices: [{ index: 0, text: r.text, logprobs: null, finish_reason: 'length' }] };
      res.writeHead(r.status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    });
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(port ?? 0, '127.0.0.1', r));
  return { baseUrl: `http://127.0.0.1:${(server.address() as { port: number }).port}`, asked: () => n };
}

/** A shard's runner as ShardAnswers sees it, its life changed by the real machine. */
function host(baseUrl: string, life0: ShardLife) {
  const stop = new AbortController();
  stops.push(stop);
  const s = { life: life0, applied: [] as ShardChange[], warned: [] as string[], told: 0 };
  const h: AnswerHost = {
    fields: { shard: 's', replica: 'r' },
    life: () => s.life,
    apply: (c) => {
      s.applied.push(c);
      const next = nextShard(s.life, c, 's');
      if (!('refused' in next)) s.life = next.life;
      return next;
    },
    target: (signal) => ({ baseUrl, model: 'm', apiKey: '', signal }),
    checksAnswers: true,
    log: { warn: (f: { why?: string }, m: string) => s.warned.push(`${m}: ${f.why}`), info: () => {}, error: () => {}, debug: () => {} } as unknown as Logger,
    stateFile: { recordKnownAnswer: async () => {} } as unknown as StateFileWriter,
    signal: stop.signal,
    told: () => s.told++,
  };
  return { s, h, answers: new ShardAnswers(h) };
}

const asleep = () => newShardLife({ state: S.SLEEPING, sleepLevel: 1, awakeMib: 1000, knownAnswer: RIGHT });
/** What wakeShard does with the answer (settleWake), on the machine. */
const settle = (h: AnswerHost) => async (a: Answered) => {
  h.apply(a.kind === 'differs' ? { kind: 'woke-without-weights', error: `woke without its weights: ${a.reason}`, lastOutput: [] } : { kind: 'woken', why: `woken; ${a.how}` });
};

describe("a wake's proof", () => {
  it("is judged against the node's record for the model's content where one is known: the shard's own answer, another checkpoint's, does not pass it", async () => {
    const other = ' another checkpoint';
    const e = await engine(() => ({ status: 200, text: other }));
    const { s, h, answers } = host(e.baseUrl, newShardLife({ state: S.SLEEPING, sleepLevel: 1, awakeMib: 1000, knownAnswer: other }));
    h.contentAnswer = () => ({ text: RIGHT });
    await answers.proveWake(settle(h));
    expect(S[s.life.state]).toBe('FAILED');
    expect(s.life.error).toContain(JSON.stringify(RIGHT.trim()).slice(1, -1));
  });

  it("look-alike: no record for the content (digest or version unknown): the shard's own answer decides, and the same answer is READY", async () => {
    const e = await engine(() => ({ status: 200, text: RIGHT }));
    const { s, h, answers } = host(e.baseUrl, asleep());
    h.contentAnswer = () => undefined;
    await answers.proveWake(settle(h));
    expect(S[s.life.state]).toBe('READY');
  });

  it('503, then 429: SLEEPING with "known answer not obtained" and the reason, told, asked again; READY once it gives its known answer', async () => {
    const e = await engine((n) => (n === 0 ? { status: 503 } : n === 1 ? { status: 429 } : { status: 200, text: RIGHT }));
    const { s, h, answers } = host(e.baseUrl, asleep());
    const errors: string[] = [];
    const apply = h.apply;
    h.apply = (c) => {
      const next = apply(c);
      if (c.kind === 'wake-failed') errors.push(s.life.error);
      return next;
    };
    await answers.proveWake(settle(h));
    expect(errors).toEqual([
      'known answer not obtained: POST /v1/completions answered 503: {"object":"error","message":"busy (503)","code":503}; asked again in 1s, READY once it gives its known answer',
      'known answer not obtained: POST /v1/completions answered 429: {"object":"error","message":"busy (429)","code":429}; asked again in 2s, READY once it gives its known answer',
    ]);
    expect(s.told).toBe(2);
    expect(S[s.life.state]).toBe('READY');
    expect(s.life.error).toBe('');
    expect(s.warned[0]).toMatch(/^known answer not obtained after a wake: .*stays SLEEPING.*answered 503/);
    expect(e.asked()).toBe(3);
  });

  it('a refused connection (the API not up yet) likewise: SLEEPING with the reason, then READY', async () => {
    const port = await freePort();
    const { s, h, answers } = host(`http://127.0.0.1:${port}`, asleep());
    const proved = answers.proveWake(settle(h));
    await until(() => s.life.error.includes('ECONNREFUSED'), 'the refusal shown', 10_000);
    expect(S[s.life.state]).toBe('SLEEPING');
    await engine(() => ({ status: 200, text: RIGHT }), port);
    await proved;
    expect(S[s.life.state]).toBe('READY');
  });

  it('true positive: when the answer finally comes and differs, FAILED with both answers', async () => {
    const e = await engine((n) => (n === 0 ? { status: 503 } : { status: 200, text: '!!!!' }));
    const { s, h, answers } = host(e.baseUrl, asleep());
    await answers.proveWake(settle(h));
    expect(S[s.life.state]).toBe('FAILED');
    expect(s.life.error).toBe('woke without its weights: it answers "!!!!" to "1, 2, 3, 4, 5, 6, 7, 8,", where it answered "the model is" before');
  });

  it('stops asking once the shard left SLEEPING (stopped meanwhile)', async () => {
    const e = await engine(() => ({ status: 503 }));
    const { s, h, answers } = host(e.baseUrl, asleep());
    const proved = answers.proveWake(settle(h));
    await until(() => s.told === 1, 'the first failed ask told', 10_000);
    h.apply({ kind: 'stop', why: 'stop requested' });
    await expect(proved).rejects.toThrow();
    expect(e.asked()).toBe(2);
  });
});

describe('the periodic check and the recheck after an unasked sleep', () => {
  const ready = () => {
    const l = newShardLife({ state: S.STARTING, knownAnswer: RIGHT });
    const r = nextShard(l, { kind: 'answered', why: 'answers /health' });
    return 'refused' in r ? l : r.life;
  };

  it('periodic: a 503 at peak load changes nothing (no "known answer changed"), and is asked again', async () => {
    const e = await engine((n) => (n < 2 ? { status: 503 } : { status: 200, text: RIGHT }));
    const { s, answers } = host(e.baseUrl, ready());
    const stop = new AbortController();
    stops.push(stop);
    void answers.watch(10, stop.signal);
    await until(() => e.asked() >= 3, 'three asks', 15_000);
    expect(S[s.life.state]).toBe('READY');
    expect(s.applied.filter((c) => c.kind === 'gpu-fault')).toEqual([]);
    expect(s.warned[0]).toMatch(/^known answer not obtained by the periodic check: .*answered 503/);
  });

  it('periodic, true positive: an answer received and different is UNHEALTHY "known answer changed"', async () => {
    const e = await engine(() => ({ status: 200, text: '!!!!' }));
    const { s, answers } = host(e.baseUrl, ready());
    const stop = new AbortController();
    stops.push(stop);
    void answers.watch(10, stop.signal);
    await until(() => s.life.state === S.UNHEALTHY, 'UNHEALTHY', 15_000);
    expect(s.life.error).toMatch(/^known answer changed: it answers "!!!!"/);
  });

  it('after an unasked sleep: a 503 leaves the shard UNHEALTHY as it was (the next probe asks again); the right answer makes it READY', async () => {
    let status = 503;
    const e = await engine(() => (status === 503 ? { status } : { status: 200, text: RIGHT }));
    const l = ready();
    const unhealthy = nextShard(l, { kind: 'probe', verdict: { healthy: false, cause: 'asleep', why: 'the engine is asleep' } });
    const { s, answers } = host(e.baseUrl, 'refused' in unhealthy ? l : unhealthy.life);
    const back = { healthy: true, cause: undefined, why: 'answers /health' } as const;
    answers.recheckAfterUnaskedSleep(back, new AbortController().signal);
    await until(() => s.warned.length > 0, 'the failed ask logged', 10_000);
    expect(S[s.life.state]).toBe('UNHEALTHY');
    expect(s.applied).toEqual([]);
    status = 200;
    answers.recheckAfterUnaskedSleep(back, new AbortController().signal);
    await until(() => s.life.state === S.READY, 'READY', 10_000);
  });
});
