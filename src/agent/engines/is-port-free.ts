import { createServer } from 'node:net';

/**
 * True when a TCP listener can be bound on host:port right now (default
 * 0.0.0.0, where engines listen; on Linux that also collides with a
 * listener on 127.0.0.1 or [::]). A probe, not a reservation: the port can
 * be taken between this check and the engine's bind; validation uses it to
 * refuse early with a clear message, not to guarantee success.
 */
export function isPortFree(port: number, host = '0.0.0.0'): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen({ port, host, exclusive: true }, () => {
      server.close(() => resolve(true));
    });
  });
}
