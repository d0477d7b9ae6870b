import { createServer, type Server } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { isPortFree } from '../../../src/agent/engines/is-port-free.js';

let server: Server | undefined;
afterEach(async () => {
  await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
  server = undefined;
});

describe('isPortFree', () => {
  it('is false while something listens on the port, even on loopback only, and true once it is gone', async () => {
    server = createServer();
    await new Promise<void>((r) => server?.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    expect(await isPortFree(port)).toBe(false);
    expect(await isPortFree(port, '127.0.0.1')).toBe(false);
    await new Promise<void>((r) => server?.close(() => r()));
    server = undefined;
    expect(await isPortFree(port)).toBe(true);
  });
});
