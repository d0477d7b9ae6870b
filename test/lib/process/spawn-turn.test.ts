import { connect, createServer, type Server, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { spawnTurn } from '../../../src/lib/process/spawn-turn.js';

let server: Server | undefined;
let client: Socket | undefined;
afterEach(() => {
  client?.destroy();
  server?.close();
});

describe('spawnTurn', () => {
  it('lets the loop read a socket between two turns asked for in the same tick, as it reads a dead engine’s pidfd', async () => {
    const order: string[] = [];
    server = createServer();
    await new Promise<void>((r) => (server as Server).listen(0, '127.0.0.1', r));
    const accepted = new Promise<Socket>((r) => server?.once('connection', r));
    client = connect((server.address() as { port: number }).port, '127.0.0.1');
    const peer = await accepted;
    const read = new Promise<void>((r) =>
      peer.once('data', () => {
        order.push('read');
        r();
      }),
    );

    const first = spawnTurn().then(() => {
      order.push('first');
      // Readable at the next poll phase, which must come before the second turn.
      client?.write('x');
    });
    const second = spawnTurn().then(() => order.push('second'));
    await Promise.all([first, second, read]);
    expect(order).toEqual(['first', 'read', 'second']);
  });
});
