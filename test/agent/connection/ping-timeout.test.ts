import { describe, expect, it } from 'vitest';
import { PING_INTERVAL_FLOOR_MS, PING_TIMEOUT_FLOOR_MS, pingTimingMs } from '../../../src/agent/connection/control-plane-connection.js';
import { until } from '../../helpers/engine-processes.js';
import { startPingAckProxy } from '../../helpers/ping-ack-proxy.js';
import { startControlPlane } from '../../helpers/start-control-plane.js';
import { runTestConnection } from '../../helpers/test-connection.js';

/*
 * The agent's HTTP/2 ping tells a dead control plane from a live one. A
 * stalled event loop (GC, a loaded machine, a big message to decode) reads a
 * ping's answer late, and looks like a dead peer to a timeout shorter than
 * the stall: at the old 1 s floor, a test agent (200 ms heartbeat) dropped
 * healthy streams and what had just been sent on them.
 */

/** The tests' heartbeat: short, so the ping's figures are their floors. */
const HEARTBEAT_MS = 200;

function connect(server: string) {
  const { connection, records } = runTestConnection('node-ping', { server, heartbeatIntervalMs: HEARTBEAT_MS });
  const pingTimedOut = () => records.some((r) => String(r.err ?? r.error ?? '').includes('PING timed out') || String(r.msg).includes('PING timed out'));
  return { connection, records, pingTimedOut };
}

describe('the HTTP/2 ping to the control plane', () => {
  it('waits longer for an answer than a loop stall lasts, and pings as often as before', () => {
    expect(pingTimingMs(HEARTBEAT_MS)).toEqual({ pingIntervalMs: PING_INTERVAL_FLOOR_MS, pingTimeoutMs: PING_TIMEOUT_FLOOR_MS });
    expect(PING_TIMEOUT_FLOOR_MS).toBe(5000);
    expect(PING_INTERVAL_FLOOR_MS).toBe(1000);
    // The product's heartbeat (5 s): twice it, above both floors.
    expect(pingTimingMs(5000)).toEqual({ pingIntervalMs: 10_000, pingTimeoutMs: 10_000 });
  });

  it('keeps the stream of a control plane whose answers to pings come 2 s late (a stalled loop reads them so)', { timeout: 60_000 }, async () => {
    const { url, port } = await startControlPlane();
    const proxy = await startPingAckProxy(port, { kind: 'late', delayMs: 2000 });
    const c = connect(url.replace(`:${port}`, `:${proxy.port}`));
    // Three late answers: each would have dropped the stream at the old 1 s timeout.
    await until(() => proxy.acks().length >= 3, 'three pings answered late', 45_000);
    await until(() => c.connection.status().phase === 'connected', 'phase connected');
    expect(proxy.connections()).toBe(1);
    expect(proxy.closedAtMs(1)).toBeUndefined();
    expect(c.pingTimedOut()).toBe(false);
    expect(c.connection.status().lastError).toBe('');
  });

  it('drops a connection on which no ping is ever answered, and dials again', { timeout: 60_000 }, async () => {
    const { url, port } = await startControlPlane();
    const proxy = await startPingAckProxy(port, { kind: 'never' });
    const c = connect(url.replace(`:${port}`, `:${proxy.port}`));
    // Interval + timeout is 6 s; the wait is a safety net.
    await until(() => proxy.connections() >= 2, 'a second connection', 45_000);
    await until(() => c.pingTimedOut(), '"PING timed out" logged');
    expect(proxy.acks().some((a) => a.connection === 1)).toBe(true);
    const acceptedAt = proxy.acceptedAtMs(1) ?? Number.NaN;
    const closedAt = proxy.closedAtMs(1) ?? Number.NaN;
    // The unanswered ping was waited on for the whole timeout: it went out after the connection opened (a bound that
    // holds however loaded the machine; the first ping comes a ping interval after, 1 s of slack). At 1 s it lived ~2 s.
    expect(closedAt - acceptedAt).toBeGreaterThanOrEqual(PING_TIMEOUT_FLOOR_MS);
  });
});
