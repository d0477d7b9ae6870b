import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { watchAfterUnload } from '../../../src/agent/adapters/post-unload-stall-watch.js';

/*
 * The watch after an unload against a real HTTP server: a stuck engine is a
 * stall; a busy one (its counters move, its ask waits) and an idle one (its
 * ask answers) are not.
 */

const closers: (() => void)[] = [];
afterEach(() => {
  for (const c of closers.splice(0)) c();
});

async function engine(o: { answers: boolean; counter: () => number; queued: number }): Promise<string> {
  const server = createServer((req, res) => {
    if (req.url === '/metrics') {
      res.end(`# TYPE q gauge\nq ${o.queued}\n# TYPE done_total counter\ndone_total ${o.counter()}\n`);
      return;
    }
    req.resume();
    if (o.answers) res.end(JSON.stringify({ choices: [{ text: '2' }] }));
    // else: never answers, as a deadlocked scheduler
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  closers.push(() => server.closeAllConnections());
  closers.push(() => server.close());
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

// A short limit where no answer ever comes; a long one where the answer is what is tested, so a loaded
// machine's slow answer is still an answer (a late answer is not a stall's look-alike this test is about).
const watch = (baseUrl: string, stallMs = 300) => watchAfterUnload({ baseUrl, apiKey: '', model: 'm', inFlightGauges: ['q'], progressCounters: ['done'] }, { stallMs, watchMs: 1500, signal: new AbortController().signal });

describe('watchAfterUnload', () => {
  it('says a stall when the one-token ask has no answer and no progress is made', async () => {
    const url = await engine({ answers: false, counter: () => 7, queued: 2 });
    expect(await watch(url)).toBe('stalled: 2 requests waiting or running, a one-token completion had no answer in 0 s and no token was generated');
  });

  it('says nothing of a busy engine whose ask waits while its counters move', async () => {
    let n = 0;
    const url = await engine({ answers: false, counter: () => n++, queued: 5 });
    expect(await watch(url)).toBeUndefined();
  });

  it('says nothing of an engine that answers', async () => {
    const url = await engine({ answers: true, counter: () => 0, queued: 0 });
    expect(await watch(url, 30_000)).toBeUndefined();
  });
});
