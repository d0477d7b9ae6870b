import { type Server, createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { UNHEALTHY_AFTER_FAILURES, watchHealth } from '../../../src/agent/supervisor/health-watch.js';
import { until } from '../../helpers/engine-processes.js';

const servers: Server[] = [];
const aborts: AbortController[] = [];
afterEach(() => {
  for (const a of aborts.splice(0)) a.abort();
  for (const s of servers.splice(0)) s.close();
});

/** A real /health endpoint whose status the test sets. */
async function healthServer() {
  const state = { status: 200, probes: 0 };
  const server = createServer((_req, res) => {
    state.probes++;
    res.writeHead(state.status).end();
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { state, baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

describe('watchHealth', () => {
  it(`calls an engine unhealthy after ${UNHEALTHY_AFTER_FAILURES} failed probes in a row, and healthy again when it answers`, async () => {
    const { state, baseUrl } = await healthServer();
    const ac = new AbortController();
    aborts.push(ac);
    const changes: boolean[] = [];
    watchHealth({ baseUrl, intervalMs: 50, signal: ac.signal, onChange: (healthy) => changes.push(healthy) });
    await until(() => state.probes >= 3, 'three healthy probes');
    expect(changes).toEqual([]);
    state.status = 503;
    await until(() => changes.length === 1, 'the unhealthy call');
    expect(changes).toEqual([false]);
    state.status = 200;
    await until(() => changes.length === 2, 'the healthy-again call');
    expect(changes).toEqual([false, true]);
  });

  it('stops probing when its signal aborts', async () => {
    const { state, baseUrl } = await healthServer();
    const ac = new AbortController();
    watchHealth({ baseUrl, intervalMs: 50, signal: ac.signal, onChange: () => {} });
    await until(() => state.probes >= 2, 'two probes');
    ac.abort();
    await new Promise((r) => setTimeout(r, 150));
    const after = state.probes;
    await new Promise((r) => setTimeout(r, 300));
    expect(state.probes).toBe(after);
  });
});
