import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { askKnownAnswer, checkKnownAnswer, isDegenerate, KNOWN_PROMPT, sameAnswer } from '../../../../src/agent/supervisor/probes/known-answer.js';

const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

interface Seen {
  body: Record<string, unknown>;
  auth: string | undefined;
}

/** An engine's /v1/completions answering `answer(body)`; records what it was asked. */
async function engine(answer: (body: Record<string, unknown>) => { status: number; json: unknown }): Promise<{ baseUrl: string; seen: Seen[] }> {
  const seen: Seen[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let text = '';
    req.on('data', (c) => (text += c));
    req.on('end', () => {
      const body = JSON.parse(text) as Record<string, unknown>;
      seen.push({ body, auth: req.headers.authorization });
      const a = answer(body);
      res.writeHead(a.status, { 'content-type': 'application/json' }).end(JSON.stringify(a.json));
    });
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as { port: number };
  return { baseUrl: `http://127.0.0.1:${port}`, seen };
}

const completion = (text: string, top?: Record<string, number>) => ({
  status: 200,
  json: { choices: [{ index: 0, text, logprobs: top ? { top_logprobs: [top] } : null, finish_reason: 'length' }] },
});

const target = (baseUrl: string) => ({ baseUrl, model: 'm', apiKey: 'k1', signal: new AbortController().signal });

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
  it('asks a greedy, short completion of the known prompt with the engine key', async () => {
    const e = await engine(() => completion(' 9, 10, 11, 12'));
    const asked = await askKnownAnswer(target(e.baseUrl));
    expect(asked).toEqual({ ok: true, text: ' 9, 10, 11, 12' });
    expect(e.seen[0]?.body).toMatchObject({ model: 'm', prompt: KNOWN_PROMPT, temperature: 0, stream: false });
    expect(e.seen[0]?.auth).toBe('Bearer k1');
  });

  it('says why when the engine gives no answer', async () => {
    const e = await engine(() => ({ status: 404, json: { message: 'no completions here' } }));
    const asked = await askKnownAnswer(target(e.baseUrl));
    expect(asked.ok).toBe(false);
    expect(!asked.ok && asked.reason).toMatch(/answered 404: .*no completions here/);
  });

  it('passes a woken engine that gives its recorded answer', async () => {
    const e = await engine(() => completion(' 9, 10, 11, 12, 13'));
    const v = await checkKnownAnswer(target(e.baseUrl), ' 9, 10, 11, 99');
    expect(v.ok).toBe(true);
    expect(e.seen).toHaveLength(1);
  });

  it('fails an engine answering garbage, naming both answers', async () => {
    const e = await engine(() => completion('!!!!!!!!'));
    const v = await checkKnownAnswer(target(e.baseUrl), ' 9, 10, 11');
    expect(v.ok).toBe(false);
    expect(!v.ok && v.reason).toContain('"!!!!!!!!"');
    expect(!v.ok && v.reason).toContain('"9, 10, 11" before');
  });

  it('passes a near tie at the first token: the recorded token among the top 5', async () => {
    const e = await engine((body) => (body.logprobs ? completion(' 9', { ' 9': -0.69, ' nine': -0.7 }) : completion(' nine, ten')));
    const v = await checkKnownAnswer(target(e.baseUrl), ' 9, 10, 11');
    expect(v.ok).toBe(true);
    expect(e.seen[1]?.body.logprobs).toBe(5);
  });

  it('fails garbage whose top first tokens do not hold the recorded one', async () => {
    const e = await engine((body) => (body.logprobs ? completion('!', { '!': -0.01, '"': -5 }) : completion('!!!!')));
    expect((await checkKnownAnswer(target(e.baseUrl), ' 9, 10')).ok).toBe(false);
  });

  it('without a recorded answer, rules out garbage only', async () => {
    const good = await engine(() => completion(' 9, 10'));
    expect((await checkKnownAnswer(target(good.baseUrl), undefined)).ok).toBe(true);
    const bad = await engine(() => completion('!!!!!!!!'));
    expect((await checkKnownAnswer(target(bad.baseUrl), undefined)).ok).toBe(false);
  });
});
