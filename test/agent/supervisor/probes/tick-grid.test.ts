import { type Server, createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { watchHealth } from '../../../../src/agent/supervisor/probes/health-watch.js';
import { msToNextSlot } from '../../../../src/agent/supervisor/probes/tick-grid.js';
import { until } from '../../../helpers/engine-processes.js';

const servers: Server[] = [];
const aborts: AbortController[] = [];
afterEach(() => {
  for (const a of aborts.splice(0)) a.abort();
  for (const s of servers.splice(0)) s.close();
});

describe('msToNextSlot', () => {
  it('waits for the next multiple of the interval', () => {
    expect(msToNextSlot(10_000, 20_000)).toBe(10_000);
    expect(msToNextSlot(10_000, 23_000)).toBe(7_000);
    expect(msToNextSlot(10_000, 24_999)).toBe(5_001);
  });

  it('never less than half an interval: just before a slot, the one after it', () => {
    expect(msToNextSlot(10_000, 25_001)).toBe(14_999);
    expect(msToNextSlot(10_000, 29_990)).toBe(10_010);
    // A tick that ran at a slot and took 40 ms waits for the next slot, not a whole interval more.
    expect(msToNextSlot(10_000, 30_040)).toBe(9_960);
  });

  it('gives ticks started at different moments the same slots', () => {
    for (const started of [0, 1_234, 4_999, 5_000, 7_777, 9_999]) {
      const at = 100_000 + started;
      expect((at + msToNextSlot(10_000, at)) % 10_000).toBe(0);
    }
  });

  it('no interval, no wait', () => {
    expect(msToNextSlot(0, 1234)).toBe(0);
  });
});

/** An engine endpoint recording when each /health probe arrived. */
async function engineServer() {
  const probedAt: number[] = [];
  const server = createServer((req, res) => {
    if (req.url === '/health') probedAt.push(performance.now());
    res.writeHead(200).end();
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { probedAt, baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

function watch(baseUrl: string, intervalMs: number) {
  const ac = new AbortController();
  aborts.push(ac);
  watchHealth({ baseUrl, intervalMs, signal: ac.signal, onVerdict: () => {} });
}

describe('health ticks of shards started at different moments', () => {
  it('probe in the same slots, as an adopting agent and the floor program do', async () => {
    const intervalMs = 2000;
    const a = await engineServer();
    const b = await engineServer();
    watch(a.baseUrl, intervalMs);
    // Half an interval later, as a launch one after another spreads them.
    await new Promise((r) => setTimeout(r, intervalMs / 2));
    watch(b.baseUrl, intervalMs);
    await until(() => b.probedAt.length >= 2 && a.probedAt.length >= 3, 'two probes of each', 20_000);
    // Without the shared slots, each of b's probes comes half an interval after one of a's.
    for (const t of b.probedAt.slice(0, 2)) {
      const nearest = Math.min(...a.probedAt.map((u) => Math.abs(u - t)));
      expect(nearest).toBeLessThan(intervalMs / 4);
    }
  });
});
