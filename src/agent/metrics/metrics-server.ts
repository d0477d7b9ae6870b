import { createServer, type Server } from 'node:http';
import type { Registry } from 'prom-client';
import { failure } from '../../lib/errors.js';

export interface MetricsServerOptions {
  registry: Registry;
  /** Why the agent is not ready (not registered with the control plane), or undefined when it is: /readyz. */
  notReady: () => string | undefined;
}

/**
 * Serves GET /metrics (Prometheus text), /healthz (200 while the process
 * answers at all: a liveness probe) and /readyz (200 once the agent is
 * registered with the control plane, 503 with the reason otherwise) on
 * host:port.
 */
export async function serveMetrics(addr: string, opts: MetricsServerOptions): Promise<Server> {
  const i = addr.lastIndexOf(':');
  const host = i > 0 ? addr.slice(0, i).replace(/^\[|\]$/g, '') : '127.0.0.1';
  const port = Number(addr.slice(i + 1));
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw failure(`metrics_addr ${JSON.stringify(addr)} is not host:port`);
  const { registry } = opts;
  const server = createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
      return;
    }
    switch (path) {
      case '/metrics':
        registry
          .metrics()
          .then((text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text))
          .catch(() => res.writeHead(500).end());
        return;
      case '/healthz':
        res.writeHead(200, { 'content-type': 'text/plain' }).end('ok\n');
        return;
      case '/readyz': {
        const why = opts.notReady();
        res.writeHead(why === undefined ? 200 : 503, { 'content-type': 'text/plain' }).end(`${why ?? 'ok'}\n`);
        return;
      }
      default:
        res.writeHead(404).end();
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err) => reject(failure(`cannot serve metrics on ${addr}: ${err.message}`, { cause: err })));
    server.listen(port, host, resolve);
  });
  return server;
}
