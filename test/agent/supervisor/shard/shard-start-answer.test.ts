import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { KnownAnswerBook } from '../../../../src/agent/supervisor/probes/known-answer-book.js';
import { ShardEngineFacts } from '../../../../src/agent/supervisor/shard/shard-engine-facts.js';
import { checkStartAnswer, contentAnswer, type StartAnswerHands } from '../../../../src/agent/supervisor/shard/shard-start-answer.js';
import { StateFileWriter } from '../../../../src/agent/supervisor/shard/state-file-writer.js';
import { parseShardId } from '../../../../src/lib/shard-id.js';
import { captureLogger } from '../../../helpers/capture-logger.js';

/*
 * The known answer at a start, by the model's content: recorded the first
 * time, checked against on every later start. The engine is a real HTTP
 * server on a real socket answering /v1/completions.
 */

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0)) c();
});

/** An engine whose completion is `text` (or a 500 when null). */
async function engine(answer: { text: string | null }) {
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      if (answer.text === null) res.writeHead(500).end('overloaded');
      else res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ choices: [{ text: answer.text }] }));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanups.push(() => server.close());
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

function setup(baseUrl: string) {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-start-answer-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const { logger, records } = captureLogger();
  const stateFile = new StateFileWriter(join(dir, 'none.json'), parseShardId('s1'), logger);
  const facts = new ShardEngineFacts({ engine: 'vllm', baseUrl, apiKey: '', stateFile, log: logger, fields: { shard: 's1' }, pid: 1 }, { engineVersion: '0.9.1' });
  const h: StartAnswerHands = { fields: { shard: 's1', replica: 'r1' }, log: logger, facts, target: (signal) => ({ baseUrl, model: 'm', apiKey: '', signal }) };
  return { h, book: new KnownAnswerBook(join(dir, 'answers.json')), records, dir };
}

const signal = () => new AbortController().signal;

describe('checkStartAnswer', () => {
  it("records the first start's answer for the model's content, then finds a later start's the same", async () => {
    const said = { text: ' Paris. It is the capital' as string | null };
    const { h, book, dir } = setup(await engine(said));
    expect(await checkStartAnswer(h, book, 'sha256:abc', 'default', signal())).toBeUndefined();
    expect(book.get({ digest: 'sha256:abc', profile: 'default', engineVersion: '0.9.1' })).toEqual({ text: ' Paris. It is the capital' });
    // Kept on disk: a restarted agent checks against it too.
    expect(new KnownAnswerBook(join(dir, 'answers.json')).get({ digest: 'sha256:abc', profile: 'default', engineVersion: '0.9.1' })?.text).toBe(' Paris. It is the capital');
    expect(await checkStartAnswer(h, book, 'sha256:abc', 'default', signal())).toBeUndefined();
  });

  it('says what differs when a later start answers otherwise, naming the content, profile and engine', async () => {
    const said = { text: ' Paris. It is the capital' as string | null };
    const { h, book } = setup(await engine(said));
    await checkStartAnswer(h, book, 'sha256:abc', 'default', signal());
    said.text = '!!!!!!!!!!!!!!!!';
    expect(await checkStartAnswer(h, book, 'sha256:abc', 'default', signal())).toMatch(/^known answer differs for the model's content sha256:abc \(profile default, engine 0\.9\.1\): /);
  });

  it('records nothing and refuses nothing when no answer is obtained (a busy engine is no wrong answer)', async () => {
    const said = { text: null as string | null };
    const { h, book, records } = setup(await engine(said));
    expect(await checkStartAnswer(h, book, 'sha256:abc', 'default', signal())).toBeUndefined();
    expect(book.get({ digest: 'sha256:abc', profile: 'default', engineVersion: '0.9.1' })).toBeUndefined();
    expect(records.some((r) => String(r.msg).includes("nothing recorded for this model's content yet"))).toBe(true);
  });

  it('keeps each content and profile apart: another digest is recorded, not judged by the first', async () => {
    const said = { text: ' Paris. It is the capital' as string | null };
    const { h, book } = setup(await engine(said));
    await checkStartAnswer(h, book, 'sha256:abc', 'default', signal());
    said.text = ' Lyon is a city';
    expect(await checkStartAnswer(h, book, 'sha256:def', 'default', signal())).toBeUndefined();
    expect(await checkStartAnswer(h, book, 'sha256:abc', 'fast', signal())).toBeUndefined();
    expect(book.get({ digest: 'sha256:def', profile: 'default', engineVersion: '0.9.1' })?.text).toBe(' Lyon is a city');
  });
});

describe('contentAnswer', () => {
  it('is the answer recorded for the content, profile and engine version; none without all three or a book', async () => {
    const { book } = setup('');
    await book.record({ digest: 'sha256:abc', profile: 'default', engineVersion: '0.9.1' }, { text: ' Paris' });
    expect(contentAnswer(book, 'sha256:abc', 'default', '0.9.1')).toEqual({ text: ' Paris' });
    expect(contentAnswer(book, 'sha256:abc', 'default', '0.9.2')).toBeUndefined();
    expect(contentAnswer(book, 'sha256:abc', 'default', undefined)).toBeUndefined();
    expect(contentAnswer(book, undefined, 'default', '0.9.1')).toBeUndefined();
    expect(contentAnswer(undefined, 'sha256:abc', 'default', '0.9.1')).toBeUndefined();
  });
});
