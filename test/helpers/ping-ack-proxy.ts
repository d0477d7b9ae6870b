import net from 'node:net';
import { onTestFinished } from 'vitest';

/** HTTP/2 frame header: length (3 bytes), type, flags, stream id (4). */
const FRAME_HEADER_BYTES = 9;
const PING = 0x6;
const ACK = 0x1;

export interface PingAckProxy {
  port: number;
  /** Connections the agent made through the proxy. */
  connections(): number;
  /** PING acks from the control plane, with when each reached the proxy (held or swallowed as the mode says). */
  acks(): { connection: number; atMs: number }[];
  /** When each connection was accepted, by its number (1 for the first). */
  acceptedAtMs(connection: number): number | undefined;
  /** When each connection closed, by its number. */
  closedAtMs(connection: number): number | undefined;
}

/**
 * A TCP proxy in front of a real HTTP/2 control plane that tampers with one
 * thing: the control plane's answers to the agent's pings. `late` holds each
 * answer (and, to keep the frames in order, whatever follows it) for
 * `delayMs`, as an agent's event loop stalled that long would read it;
 * `never` swallows them, a peer gone dead under a live TCP connection.
 * Everything else passes as it is. Closed when the test finishes.
 */
export async function startPingAckProxy(upstreamPort: number, mode: { kind: 'late'; delayMs: number } | { kind: 'never' }): Promise<PingAckProxy> {
  let connections = 0;
  const acks: { connection: number; atMs: number }[] = [];
  const accepted = new Map<number, number>();
  const closed = new Map<number, number>();
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const n = ++connections;
    accepted.set(n, Date.now());
    const upstream = net.connect(upstreamPort, '127.0.0.1');
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => {});
      s.once('close', () => {
        sockets.delete(s);
        client.destroy();
        upstream.destroy();
        if (!closed.has(n)) closed.set(n, Date.now());
      });
    }
    client.pipe(upstream);
    let pending = Buffer.alloc(0);
    const held: Buffer[] = [];
    let holding = false;
    upstream.on('data', (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk]);
      while (pending.length >= FRAME_HEADER_BYTES) {
        const size = FRAME_HEADER_BYTES + pending.readUIntBE(0, 3);
        if (pending.length < size) break;
        const frame = pending.subarray(0, size);
        pending = pending.subarray(size);
        const isAck = frame[3] === PING && (frame[4] & ACK) !== 0;
        if (isAck) acks.push({ connection: n, atMs: Date.now() });
        if (isAck && mode.kind === 'never') continue;
        if (isAck && mode.kind === 'late' && !holding) {
          holding = true;
          setTimeout(() => {
            holding = false;
            if (!client.destroyed) client.write(Buffer.concat(held.splice(0)));
          }, mode.delayMs);
        }
        if (holding) held.push(Buffer.from(frame));
        else client.write(frame);
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  onTestFinished(async () => {
    for (const s of sockets) s.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return {
    port: (server.address() as net.AddressInfo).port,
    connections: () => connections,
    acks: () => [...acks],
    acceptedAtMs: (connection) => accepted.get(connection),
    closedAtMs: (connection) => closed.get(connection),
  };
}
