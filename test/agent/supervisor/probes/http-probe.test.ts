import { createServer, type Socket } from 'node:net';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterEach, describe, expect, it } from 'vitest';
import { bodyCapFor, httpGet, METRICS_BODY_MAX_BYTES, PROBE_BODY_MAX_BYTES } from '../../../../src/agent/supervisor/probes/http-probe.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const sockets: Socket[] = [];
const servers: ReturnType<typeof createServer>[] = [];
afterEach(() => {
  for (const s of sockets.splice(0)) s.destroy();
  for (const s of servers.splice(0)) s.close();
});

/** A server that accepts connections and never answers: a hung engine. */
async function silentServer(): Promise<string> {
  const server = createServer((socket) => sockets.push(socket));
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as { port: number };
  return `http://127.0.0.1:${port}/health`;
}

describe('httpGet', () => {
  it('gives up on an engine that never answers, even with the garbage collector running meanwhile', async () => {
    const url = await silentServer();
    const gcs = setInterval(gc, 5);
    try {
      const results = await Promise.allSettled(Array.from({ length: 20 }, () => httpGet(url, { timeoutMs: 300 })));
      for (const r of results) {
        expect(r.status).toBe('rejected');
        expect((r as PromiseRejectedResult).reason.name).toBe('TimeoutError');
      }
    } finally {
      clearInterval(gcs);
    }
  }, 15_000);

  it("ends at once when the caller's signal aborts, as an AbortError carrying the reason, never as the time limit", async () => {
    const url = await silentServer();
    const ac = new AbortController();
    const asked = httpGet(url, { timeoutMs: 60_000, signal: ac.signal });
    const reason = new Error('shard stopped');
    setTimeout(() => ac.abort(reason), 50);
    const err = await asked.then(
      () => undefined,
      (e: unknown) => e as Error & { code?: string },
    );
    expect(err?.name).toBe('AbortError');
    expect(err?.code).toBe('ABORT_ERR');
    expect(err?.cause).toBe(reason);
    // Already aborted: no request is made at all.
    await expect(httpGet(url, { timeoutMs: 60_000, signal: ac.signal })).rejects.toMatchObject({ name: 'AbortError' });
  }, 15_000);

  it('reads only the path for its cap: /metrics gets the large cap, a query naming metrics does not', () => {
    expect(bodyCapFor('http://127.0.0.1:8000/metrics')).toBe(METRICS_BODY_MAX_BYTES);
    expect(bodyCapFor('http://127.0.0.1:8000/metrics?x=1')).toBe(METRICS_BODY_MAX_BYTES);
    expect(bodyCapFor('http://127.0.0.1:8000/health?next=/metrics')).toBe(PROBE_BODY_MAX_BYTES);
    expect(bodyCapFor('http://127.0.0.1:8000/v1/models#/metrics')).toBe(PROBE_BODY_MAX_BYTES);
  });
});
