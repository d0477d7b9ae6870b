import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { type BaseBaseline, type ProofPolicy, proveAdapter } from '../../../src/agent/adapters/prove-adapter.js';
import { KnownAnswerBook } from '../../../src/agent/supervisor/probes/known-answer-book.js';

/*
 * The proof against a real HTTP server that answers completions by model:
 * what the engine says decides, and a busy engine is never a wrong one.
 */

const closers: (() => void)[] = [];
afterEach(() => {
  for (const c of closers.splice(0)) c();
});

type Answer = { status: number; text?: string; body?: string };

async function engine(answer: (model: string, n: number) => Answer): Promise<{ url: string; asked: string[] }> {
  const asked: string[] = [];
  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const model = (JSON.parse(body) as { model: string }).model;
      asked.push(model);
      const a = answer(model, asked.filter((m) => m === model).length);
      res.writeHead(a.status, { 'content-type': 'application/json' });
      res.end(a.body ?? JSON.stringify({ choices: [{ text: a.text ?? '' }] }));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  closers.push(() => server.close());
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, asked };
}

function book(): KnownAnswerBook {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-proof-'));
  closers.push(() => rmSync(dir, { recursive: true, force: true }));
  return new KnownAnswerBook(join(dir, 'answers.json'));
}

const policy: ProofPolicy = { attempts: 3, delayMs: 20, timeoutMs: 2000 };
const key = { adapterDigest: 'sha256:aa', base: 'sha256:base' };

async function prove(url: string, b: KnownAnswerBook, baseline: BaseBaseline = {}, name = 'a', k = key) {
  return proveAdapter({ baseUrl: url, apiKey: '', baseModel: 'base', signal: new AbortController().signal }, name, k, b, baseline, policy);
}

describe('proveAdapter', () => {
  it('proves an adapter that answers other than its base, records the answer, and holds the bytes to it at the next load', async () => {
    const b = book();
    let adapterText = ' 9, 10, banana';
    const e = await engine((m) => ({ status: 200, text: m === 'base' ? ' 9, 10, 11' : adapterText }));
    expect(await prove(e.url, b)).toMatchObject({ kind: 'proven', how: expect.stringContaining('recorded as its answer') });
    expect(await prove(e.url, b)).toMatchObject({ kind: 'proven', how: expect.stringContaining('gives its recorded answer') });
    // Other weights served under the name (vLLM #47724): both answers in the reason.
    adapterText = ' 9, 10, cherry pie';
    const wrong = await prove(e.url, b);
    expect(wrong.kind).toBe('failed');
    expect(wrong.kind === 'failed' && wrong.reason).toMatch(/a answers "9, 10, cherry pie", where these bytes answered "9, 10, banana" at their first load/);
  });

  it('an adapter that agrees with its base at its first load, on an engine that refuses names it never loaded, is proven and recorded; the same answer later is its own', async () => {
    // vLLM: 404 for a name it never loaded. The adapter answers as the base does (a small rank, a zero lora_B): no fault.
    const e = await engine((m) => (m === 'base' || m === 'a' ? { status: 200, text: ' 9, 10, 11' } : { status: 404, body: `{"message":"The model \`${m}\` does not exist."}` }));
    const b = book();
    expect(await prove(e.url, b)).toMatchObject({ kind: 'proven', how: expect.stringMatching(/^answers "9, 10, 11", as its base does .*recorded as its answer$/) });
    expect(e.asked.filter((m) => m.startsWith('llmgw-absent-'))).toHaveLength(1);
    expect(await prove(e.url, b)).toMatchObject({ kind: 'proven', how: 'gives its recorded answer "9, 10, 11" (base: the same, as at its first load)' });
    // Recorded: the control name is not asked again.
    expect(e.asked.filter((m) => m.startsWith('llmgw-absent-'))).toHaveLength(1);
  });

  it('SGLang\'s refusal (400, "never been loaded") counts as the engine telling names apart, asked once', async () => {
    const e = await engine((m) => (m.startsWith('llmgw-absent-') ? { status: 400, body: '{"message":"Got LoRA adapter that has never been loaded: x"}' } : { status: 200, text: ' 9, 10, 11' }));
    expect(await prove(e.url, book())).toMatchObject({ kind: 'proven' });
    expect(e.asked.filter((m) => m.startsWith('llmgw-absent-'))).toHaveLength(1);
  });

  it('an engine that answers a name it never loaded as the base leaves an adapter agreeing with its base unproven, not recorded, never failed', async () => {
    // SGLang asked by a bare name serves the base: names tell nothing.
    const e = await engine(() => ({ status: 200, text: ' 9, 10, 11' }));
    const b = book();
    const p = await prove(e.url, b);
    expect(p).toMatchObject({ kind: 'unproven', reason: expect.stringMatching(/^unproven: a answers "9, 10, 11" as the base model does, and so does llmgw-absent-[0-9a-f]{8}, a name the engine never loaded/) });
    expect(b.get({ digest: key.adapterDigest, profile: `lora-on:${key.base}`, engineVersion: '' })).toBeUndefined();
  });

  it('fails an adapter that now answers as its base does, where its bytes answered otherwise at their first load (loaded in name only, vLLM #9688), naming both answers', async () => {
    const b = book();
    let applied = true;
    const e = await engine((m) => (m === 'base' || !applied ? { status: 200, text: ' 9, 10, 11' } : { status: 200, text: ' 9, 10, banana' }));
    expect(await prove(e.url, b)).toMatchObject({ kind: 'proven' });
    applied = false;
    const p = await prove(e.url, b);
    expect(p.kind === 'failed' && p.reason).toBe('a answers "9, 10, 11", as the base model does, where these bytes answered "9, 10, banana" at their first load on this base: the engine is not applying it; unload and load it again');
  });

  it('an adapter recorded as agreeing with its base that later answers otherwise is failed: its own record, not the base, is the reference', async () => {
    const b = book();
    let text = ' 9, 10, 11';
    const e = await engine((m) => (m === 'base' ? { status: 200, text: ' 9, 10, 11' } : m === 'a' ? { status: 200, text } : { status: 404, body: '{}' }));
    expect(await prove(e.url, b)).toMatchObject({ kind: 'proven' });
    text = ' 9, 10, other tenant';
    const p = await prove(e.url, b);
    expect(p.kind === 'failed' && p.reason).toMatch(/^a answers "9, 10, other tenant", where these bytes answered "9, 10, 11" at their first load/);
  });

  it('fails an adapter the engine does not know (404), asking once', async () => {
    const e = await engine((m) => (m === 'base' ? { status: 200, text: ' 9' } : { status: 404, body: '{"message":"The model `a` does not exist."}' }));
    const p = await prove(e.url, book());
    expect(p.kind === 'failed' && p.reason).toMatch(/does not serve it .*404/);
    expect(e.asked.filter((m) => m === 'a')).toHaveLength(1);
  });

  it('fails when the base model\'s answer changed since the shard\'s first proof', async () => {
    const baseline = { text: ' 9, 10, 11' };
    const e = await engine((m) => ({ status: 200, text: m === 'base' ? ' !!!!' : ' x' }));
    const p = await prove(e.url, book(), baseline);
    expect(p.kind === 'failed' && p.reason).toMatch(/the base model answers "!!!!" .* where it answered "9, 10, 11" before/);
  });

  it('a busy engine (503, then an answer) is asked again and proves the adapter: not a mismatch', async () => {
    const e = await engine((m, n) => (m === 'base' ? { status: 200, text: ' 9' } : n < 3 ? { status: 503, body: 'busy' } : { status: 200, text: ' 9 adapter' }));
    expect(await prove(e.url, book())).toMatchObject({ kind: 'proven' });
    expect(e.asked.filter((m) => m === 'a')).toHaveLength(3);
  });

  it('an engine busy for every ask leaves the adapter unproven, never failed', async () => {
    const e = await engine((m) => (m === 'base' ? { status: 200, text: ' 9' } : { status: 429, body: 'too many requests' }));
    const p = await prove(e.url, book());
    expect(p).toMatchObject({ kind: 'unproven', reason: expect.stringMatching(/^unproven: a did not answer .*429/) });
  });
});
