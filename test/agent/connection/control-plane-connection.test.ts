import { create } from '@bufbuild/protobuf';
import { describe, expect, it, onTestFinished } from 'vitest';
import type { ConnectionPhase } from '../../../src/agent/connection/connection-state.js';
import { ControlPlaneConnection, describeStreamError } from '../../../src/agent/connection/control-plane-connection.js';
import { buildHeartbeat, buildRegister, describeNode } from '../../../src/agent/connection/register-message.js';
import { type AgentMessage, InventorySchema } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { startBadControlPlane } from '../../faults/scenarios/bad-control-plane.js';
import { captureLogger } from '../../helpers/capture-logger.js';
import { freePort, until } from '../../helpers/engine-processes.js';
import { isRegister } from '../../helpers/sim-shards.js';
import { startControlPlane } from '../../helpers/start-control-plane.js';

const NODE = describeNode({ nodeId: 'node-conn', hostname: 'h', mgmtAddr: '127.0.0.1', mgmtInterface: 'lo', labels: {}, fabrics: [] }, 'test');
const INVENTORY = create(InventorySchema, {});

/** A real connection to `server`, run until the test ends, with what it did recorded. */
function connect(server: string, overrides: { registerTimeoutMs?: number; random?: { backoff: () => number; cleanClose: () => number } } = {}) {
  const { logger, records } = captureLogger();
  const events: string[] = [];
  const connection = new ControlPlaneConnection({
    config: {
      server,
      protocol: 'connect',
      tls: { cert: '', key: '', ca: '', expiryWarningMs: 0 },
      heartbeatIntervalMs: 200,
      registerTimeoutMs: overrides.registerTimeoutMs ?? 5_000,
      reconnectBaseMs: 50,
      reconnectMaxMs: 400,
    },
    logger,
    random: overrides.random,
    session: {
      register: () => buildRegister(NODE, INVENTORY, []),
      heartbeat: () => buildHeartbeat(NODE.nodeId, [], INVENTORY),
      onOpen: () => void events.push('open'),
      onClosed: () => void events.push('closed'),
      onControlMessage: (m) => void events.push(`control:${m.msg.case}`),
    },
  });
  const shutdown = new AbortController();
  let phaseWhileStopping: ConnectionPhase | undefined;
  const running = connection.run(shutdown.signal, {
    onFirstAttempt: () => void events.push('first-attempt'),
    onStopping: () => {
      phaseWhileStopping = connection.status().phase;
    },
  });
  onTestFinished(async () => {
    shutdown.abort();
    await running;
  });
  const changes = () => records.filter((r) => r.msg === 'control-plane connection').map((r) => `${r.from}→${r.to}`);
  const stop = async () => {
    shutdown.abort();
    await running;
    return phaseWhileStopping;
  };
  return { connection, records, events, changes, stop };
}

describe('ControlPlaneConnection', () => {
  it('registers, is connected once the control plane answers, and on shutdown goes stopping then stopped', async () => {
    const { cp, url } = await startControlPlane();
    const registered = cp.waitFor('node-conn', isRegister, 20_000);
    const c = connect(url);
    await registered;
    await until(() => c.connection.status().phase === 'connected', 'phase connected');
    expect(c.connection.status()).toMatchObject({ server: url, protocol: 'connect', attempt: 0, lastError: '', nextAttemptAtMs: 0 });
    expect(c.connection.status().connectedSinceMs).toBeGreaterThan(0);
    await cp.waitFor('node-conn', (m: AgentMessage) => m.msg.case === 'heartbeat', 20_000);
    expect(c.events.slice(0, 3)).toEqual(['first-attempt', 'open', 'control:ack']);

    expect(await c.stop()).toBe('stopping');
    expect(c.connection.status().phase).toBe('stopped');
    expect(c.changes()).toEqual(['starting→connecting', 'connecting→connected', 'connected→stopping', 'stopping→stopped']);
    expect(c.events.filter((e) => e === 'closed')).toHaveLength(1);
  });

  it('registers again after the control plane restarts, with message ids that go on from the last session', async () => {
    const first = await startControlPlane();
    const c = connect(first.url);
    await first.cp.waitFor('node-conn', isRegister, 20_000);
    const lastId = () => first.cp.messages('node-conn').at(-1)?.messageId ?? 0n;
    await first.cp.waitFor('node-conn', (m) => m.msg.case === 'heartbeat', 20_000);
    const before = lastId();
    await first.close();
    const again = await startControlPlane({ port: first.port });
    const reg = await again.cp.waitFor('node-conn', isRegister, 20_000);
    expect(reg.messageId).toBeGreaterThan(before);
    await until(() => c.connection.status().phase === 'connected', 'connected again');
    expect(c.connection.status().attempt).toBe(0);
  });

  it('retries an unreachable control plane with a growing attempt count and says why', async () => {
    const port = await freePort();
    const c = connect(`http://127.0.0.1:${port}`);
    await until(() => c.connection.status().attempt >= 3, 'a third failed attempt');
    const retries = c.records.filter((r) => r.msg === 'cannot reach the control plane; retrying');
    expect(retries.slice(0, 3).map((r) => r.attempt)).toEqual([1, 2, 3]);
    expect(String(retries[0]?.err)).toMatch(/ECONNREFUSED/);
    expect(c.changes().slice(0, 4)).toEqual(['starting→connecting', 'connecting→retrying', 'retrying→connecting', 'connecting→retrying']);
    const s = c.connection.status();
    if (s.phase === 'retrying') expect(s.nextAttemptAtMs).toBeGreaterThan(0);
    expect(s.lastError).toMatch(/ECONNREFUSED/);
    expect(s.connectedSinceMs).toBe(0);
  });

  it('with jitter off, comes straight back after one clean close, and backs off when every stream is closed at once', async () => {
    const port = await freePort();
    const bad = await startBadControlPlane('close-after-register', port);
    onTestFinished(() => bad.close());
    const c = connect(`http://127.0.0.1:${port}`, { random: { backoff: () => 1, cleanClose: () => 0 } });
    await until(() => c.connection.status().attempt >= 2, 'backoff after repeated clean closes');
    const closes = c.records.filter((r) => r.msg === 'control plane closed the stream; reconnecting');
    expect(closes.map((r) => r.retryInMs)).toEqual([0]);
    // The stream closed before the control plane answered: dialled again, never connected.
    expect(c.changes().slice(0, 3)).toEqual(['starting→connecting', 'connecting→connecting', 'connecting→retrying']);
    const retry = c.records.find((r) => r.msg === 'cannot reach the control plane; retrying');
    expect(retry?.err).toBe('the control plane ended 2 streams in a row soon after they opened');
    // Jitter off: the whole backoff, 50 ms then 100 ms.
    expect(c.records.filter((r) => r.msg === 'cannot reach the control plane; retrying').slice(0, 2).map((r) => r.retryInMs)).toEqual([50, 100]);
  });

  it('waits a jittered part of reconnect_base after a clean close, counted as no failed attempt', async () => {
    const port = await freePort();
    const bad = await startBadControlPlane('close-after-register', port);
    onTestFinished(() => bad.close());
    // 0.5 of the 50 ms base: 25 ms, shown as retrying with attempt 0.
    const c = connect(`http://127.0.0.1:${port}`, { random: { backoff: () => 1, cleanClose: () => 0.5 } });
    await until(() => c.connection.status().attempt >= 2, 'backoff after repeated clean closes');
    const closes = c.records.filter((r) => r.msg === 'control plane closed the stream; reconnecting');
    expect(closes.map((r) => r.retryInMs)).toEqual([25]);
    expect(c.changes().slice(0, 4)).toEqual(['starting→connecting', 'connecting→retrying', 'retrying→connecting', 'connecting→retrying']);
    const waits = c.records.filter((r) => r.msg === 'control-plane connection' && r.to === 'retrying');
    expect(waits[0]?.attempt).toBe(0);
  });

  it('spreads the reconnects of many connections closed at once over reconnect_base', async () => {
    const port = await freePort();
    const bad = await startBadControlPlane('close-after-register', port);
    onTestFinished(() => bad.close());
    // Real Math.random: ten connections, each closed once; their delays cannot all be the same.
    const cs = Array.from({ length: 10 }, () => connect(`http://127.0.0.1:${port}`));
    await until(() => cs.every((c) => c.records.some((r) => r.msg === 'control plane closed the stream; reconnecting')), 'a clean close on every connection');
    const delays = cs.map((c) => c.records.find((r) => r.msg === 'control plane closed the stream; reconnecting')?.retryInMs as number);
    for (const d of delays) {
      expect(d).toBeGreaterThanOrEqual(0);
      expect(d).toBeLessThan(50);
    }
    expect(new Set(delays).size).toBeGreaterThan(1);
  });
});

describe('describeStreamError', () => {
  it('names the causes under the error, with their codes, once each', () => {
    const socket = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' });
    const tls = Object.assign(new Error('unable to verify the first certificate'), { code: 'UNABLE_TO_VERIFY_LEAF_SIGNATURE', cause: socket });
    expect(describeStreamError(new Error('stream failed', { cause: tls }))).toBe(
      'stream failed: unable to verify the first certificate (UNABLE_TO_VERIFY_LEAF_SIGNATURE): connect ECONNREFUSED 127.0.0.1:1',
    );
  });

  it('is the message alone for an error without a cause', () => {
    expect(describeStreamError(new Error('the control plane sent nothing within 5s'))).toBe('the control plane sent nothing within 5s');
  });
});
