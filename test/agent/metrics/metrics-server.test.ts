import { connect } from 'node:net';
import type { Server } from 'node:http';
import { Gauge, Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { serveMetrics } from '../../../src/agent/metrics/metrics-server.js';
import { until } from '../../helpers/engine-processes.js';

/*
 * Security review 3, S10: /metrics is readable by any local user and each
 * rendering asks every engine for its own. Renderings are shared for a
 * second, and connections are capped.
 */

let server: Server | undefined;
afterEach(async () => {
  await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
  server = undefined;
});

async function start(renderCacheMs?: number, scrapesPerSecond?: number): Promise<{ url: string; gauge: Gauge }> {
  const registry = new Registry();
  const gauge = new Gauge({ name: 'llmgw_test_value', help: 'a value', registers: [registry] });
  server = await serveMetrics('127.0.0.1:0', { registry, notReady: () => undefined, renderCacheMs, scrapesPerSecond });
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, gauge };
}

describe('the metrics server', () => {
  it('serves one rendering again within its period, whoever scrapes, and renders anew after it', async () => {
    // A period no slow machine outlasts between two scrapes, then one that is over at once.
    const held = await start(60_000);
    held.gauge.set(1);
    const first = await (await fetch(`${held.url}/metrics`)).text();
    held.gauge.set(2);
    expect(first).toContain('llmgw_test_value 1');
    expect(await (await fetch(`${held.url}/metrics`)).text()).toBe(first);
    await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
    const fresh = await start(0);
    fresh.gauge.set(1);
    await fetch(`${fresh.url}/metrics`);
    fresh.gauge.set(2);
    expect(await (await fetch(`${fresh.url}/metrics`)).text()).toContain('llmgw_test_value 2');
  });

  it('keeps at most 32 connections open, closing the rest as they come', async () => {
    const { url } = await start();
    const { port } = new URL(url);
    const sockets = await Promise.all(
      Array.from({ length: 40 }, () => new Promise<ReturnType<typeof connect>>((resolve) => {
        const s = connect(Number(port), '127.0.0.1', () => resolve(s));
        s.resume();
        s.on('error', () => {});
      })),
    );
    // Half-sent requests: the server closes what is over its cap.
    for (const s of sockets) s.write('GET /metrics HTTP/1.1\r\n');
    const open = () => sockets.filter((s) => !s.destroyed && !s.readableEnded).length;
    try {
      await until(() => open() <= 32, 'the connections over the cap to be closed', 10_000);
      expect(open()).toBe(32);
    } finally {
      for (const s of sockets) s.destroy();
    }
  });

  // Security review 4, S10: cached renderings still left 7205 answers a second, 96% of a core.
  it('answers /metrics in turns, whoever scrapes: six scrapers at once at two a second wait 2.5 s for the last answer', async () => {
    const { url } = await start(60_000, 2);
    const t0 = performance.now();
    const done = await Promise.all(Array.from({ length: 6 }, () => fetch(`${url}/metrics`).then(async (r) => [r.status, await r.text(), performance.now() - t0] as const)));
    expect(done.map(([status]) => status)).toEqual([200, 200, 200, 200, 200, 200]);
    // Turns at 0, 0.5, ... 2.5 s: none can come sooner (a lower bound, whatever the machine's load).
    expect(Math.max(...done.map(([, , ms]) => ms))).toBeGreaterThanOrEqual(2400);
  });

  it('answers a lone scrape at once, and /healthz never waits for a turn (look-alikes)', async () => {
    const { url } = await start(60_000, 0.1);
    const t0 = performance.now();
    expect((await fetch(`${url}/metrics`)).status).toBe(200);
    // The next /metrics turn is 10 s away; /healthz is not a scrape.
    expect(await (await fetch(`${url}/healthz`)).text()).toBe('ok\n');
    expect(performance.now() - t0).toBeLessThan(5000);
  });

  it('closes a connection that pipelines a second /metrics before its first is answered', async () => {
    const { url } = await start(60_000, 0.1);
    const { port } = new URL(url);
    // Take the free turn, so the next request waits.
    await fetch(`${url}/metrics`);
    const s = connect(Number(port), '127.0.0.1');
    s.on('error', () => {});
    let got = '';
    s.on('data', (b: Buffer) => {
      got += b.toString();
    });
    const closed = new Promise<void>((resolve) => s.once('close', () => resolve()));
    s.write('GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n');
    await closed;
    expect(got).toBe('');
  });
});
