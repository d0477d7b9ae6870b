import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { create, toBinary } from '@bufbuild/protobuf';
import { describe, expect, it, onTestFinished } from 'vitest';
import { ControlPlaneConnection } from '../../../src/agent/connection/control-plane-connection.js';
import { CONTROL_SLICE_MS } from '../../../src/agent/connection/control-plane-session.js';
import { buildHeartbeat, buildRegister, describeNode } from '../../../src/agent/connection/register-message.js';
import { type ControlMessage, ControlMessageSchema, InventorySchema } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { captureLogger } from '../../helpers/capture-logger.js';
import { until } from '../../helpers/engine-processes.js';

/*
 * A control plane's burst arrives in one socket read: thousands of small
 * commands the stream hands over in microtasks. Handled in one go they held
 * the agent's event loop past its HTTP/2 ping timeout on a loaded machine,
 * and the agent dropped a control plane that was answering
 * (test/security/control-plane-flood.test.ts, "repeated StopShards").
 */

const NODE = describeNode({ nodeId: 'node-slices', hostname: 'h', mgmtAddr: '127.0.0.1', mgmtInterface: 'lo', labels: {}, fabrics: [] }, 'test');
const INVENTORY = create(InventorySchema, {});
const BURST = 5000;
/** Each command costs this much CPU: the burst is 250 ms of work, a dozen slices. */
const HANDLER_COST_MS = 0.05;

function envelope(m: ControlMessage): Buffer {
  const payload = toBinary(ControlMessageSchema, m);
  const head = Buffer.alloc(5);
  head.writeUInt32BE(payload.length, 1);
  return Buffer.concat([head, payload]);
}

/** A control plane that answers Register with `count` DrainShards in one write, then holds the stream open. */
async function burstControlPlane(count: number): Promise<string> {
  const burst = Buffer.concat(
    Array.from({ length: count }, (_, i) => envelope(create(ControlMessageSchema, { messageId: BigInt(i + 1), msg: { case: 'drain', value: { shardId: `s${i}` } } }))),
  );
  const server = http2.createServer();
  server.on('stream', (stream) => {
    stream.on('error', () => {});
    stream.respond({ ':status': 200, 'content-type': 'application/connect+proto' });
    stream.once('data', () => stream.write(burst));
  });
  server.on('sessionError', () => {});
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on('session', (s) => sessions.add(s));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  onTestFinished(async () => {
    for (const s of sessions) s.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** The agent's connection to `server`; each control message's id and the event-loop turn it was handled in. */
function connect(server: string, costMs: number) {
  const handled: { id: bigint; turn: number }[] = [];
  // One increment per turn of the event loop: a setImmediate queued in the check phase runs in the next one.
  let turn = 0;
  let ticker = setImmediate(function tick() {
    turn += 1;
    ticker = setImmediate(tick);
  });
  const connection = new ControlPlaneConnection({
    config: {
      server,
      protocol: 'connect',
      tls: { cert: '', key: '', ca: '', expiryWarningMs: 0 },
      heartbeatIntervalMs: 1000,
      registerTimeoutMs: 10_000,
      reconnectBaseMs: 50,
      reconnectMaxMs: 400,
    },
    logger: captureLogger().logger,
    session: {
      register: () => buildRegister(NODE, INVENTORY, []),
      heartbeat: () => buildHeartbeat(NODE.nodeId, [], INVENTORY),
      onOpen: () => {},
      onClosed: () => {},
      onControlMessage: (m) => {
        const busyUntil = performance.now() + costMs;
        while (performance.now() < busyUntil) {
          // The CPU a real command costs.
        }
        handled.push({ id: m.messageId, turn });
      },
    },
  });
  const shutdown = new AbortController();
  const running = connection.run(shutdown.signal);
  onTestFinished(async () => {
    clearImmediate(ticker);
    shutdown.abort();
    await running;
  });
  /** The most commands handled in one turn of the event loop. */
  const longestRun = () => {
    const perTurn = new Map<number, number>();
    for (const h of handled) perTurn.set(h.turn, (perTurn.get(h.turn) ?? 0) + 1);
    return Math.max(0, ...perTurn.values());
  };
  return { handled, longestRun };
}

describe('control messages from one burst', () => {
  it('are handled in slices that give the event loop a turn, so timers and sockets are not held for the whole burst', async () => {
    const c = connect(await burstControlPlane(BURST), HANDLER_COST_MS);
    await until(() => c.handled.length === BURST, `${BURST} control messages handled`, 60_000);
    // A slice is CONTROL_SLICE_MS of handling: 400 commands at 0.05 ms, fewer when the machine is slower.
    // Handled in one go, the whole burst (or one 64 KiB read of it, about 3 000) shared one turn.
    expect(c.longestRun()).toBeLessThanOrEqual(Math.ceil(CONTROL_SLICE_MS / HANDLER_COST_MS) + 1);
  });

  it('are every one handled, once and in the order sent, however they are sliced', async () => {
    const c = connect(await burstControlPlane(BURST), HANDLER_COST_MS);
    await until(() => c.handled.length === BURST, `${BURST} control messages handled`, 60_000);
    expect(c.handled.map((h) => h.id)).toEqual(Array.from({ length: BURST }, (_, i) => BigInt(i + 1)));
  });

  it('cheap commands still go many to a turn: a slice is measured in time, not one turn per message', async () => {
    const c = connect(await burstControlPlane(BURST), 0);
    await until(() => c.handled.length === BURST, `${BURST} control messages handled`, 60_000);
    expect(c.longestRun()).toBeGreaterThan(1);
  });
});
