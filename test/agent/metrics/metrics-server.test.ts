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

async function start(renderCacheMs?: number): Promise<{ url: string; gauge: Gauge }> {
  const registry = new Registry();
  const gauge = new Gauge({ name: 'llmgw_test_value', help: 'a value', registers: [registry] });
  server = await serveMetrics('127.0.0.1:0', { registry, notReady: () => undefined, renderCacheMs });
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
});
