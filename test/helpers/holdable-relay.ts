import { type Server, type Socket, connect, createServer } from 'node:net';
import { onTestFinished } from 'vitest';
import type { OnTestEnd } from './start-control-plane.js';

/**
 * A TCP relay on 127.0.0.1 in front of `targetPort` that a test can hold: a
 * link that goes quiet without closing (a congested or cut-off path, no FIN,
 * no reset). Held, neither side's bytes are passed on, and none are lost:
 * release() delivers them in order. Connections made while held wait too.
 */
export interface HoldableRelay {
  port: number;
  hold(): void;
  release(): void;
  close(): Promise<void>;
}

interface Leg {
  from: Socket;
  to: Socket;
  queued: Buffer[];
}

export async function startHoldableRelay(targetPort: number, onEnd: OnTestEnd = onTestFinished): Promise<HoldableRelay> {
  let held = false;
  const legs = new Set<Leg>();
  const sockets = new Set<Socket>();
  const pass = (leg: Leg, chunk: Buffer) => {
    if (held) leg.queued.push(chunk);
    else leg.to.write(chunk);
  };
  const server: Server = createServer((client) => {
    const upstream = connect(targetPort, '127.0.0.1');
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => s.destroy());
      s.on('close', () => sockets.delete(s));
    }
    const up: Leg = { from: client, to: upstream, queued: [] };
    const down: Leg = { from: upstream, to: client, queued: [] };
    for (const leg of [up, down]) {
      legs.add(leg);
      leg.from.on('data', (chunk: Buffer) => pass(leg, chunk));
      leg.from.on('end', () => leg.to.end());
      leg.from.on('close', () => {
        legs.delete(leg);
        leg.to.destroy();
      });
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('the relay has no TCP port');
  const relay: HoldableRelay = {
    port: address.port,
    hold: () => {
      held = true;
    },
    release: () => {
      held = false;
      for (const leg of legs) for (const chunk of leg.queued.splice(0)) leg.to.write(chunk);
    },
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  try {
    onEnd(() => relay.close());
  } catch {
    // Not inside a test: the caller owns close().
  }
  return relay;
}
