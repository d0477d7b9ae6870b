import { createServer, type Server } from 'node:http';
import type { Socket } from 'node:net';
import type { Registry } from 'prom-client';
import { failure } from '../../lib/errors.js';

/** A rendering of /metrics is served again for this long. */
const RENDER_CACHE_MS = 1000;
/** A request's head must arrive within this. */
const HEADERS_TIMEOUT_MS = 5000;
/** Connections open at once; more are closed as they come. */
const MAX_CONNECTIONS = 32;
/**
 * /metrics answers served a second at most, whoever asks; the rest wait
 * their turn. Cached renderings left the HTTP work itself: 64 scrapers
 * back to back got 7205 answers a second and held the agent at 96% of a
 * core (security review 4, S10). Prometheus scrapes each target every
 * 15 s by default, so 20 a second is a fleet of servers scraping every
 * second; with the connection cap, a turn is at most 32 / 20 = 1.6 s away.
 */
const SCRAPES_PER_SECOND = 20;

export interface MetricsServerOptions {
  registry: Registry;
  /** Why the agent is not ready (not registered with the control plane), or undefined when it is: /readyz. */
  notReady: () => string | undefined;
  /** RENDER_CACHE_MS unless a test wants another. */
  renderCacheMs?: number;
  /** SCRAPES_PER_SECOND unless a test wants another. */
  scrapesPerSecond?: number;
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
  // One rendering a second, whoever scrapes (security review 3, S10): 64 scrapers at 94/s cost the agent 25 CPU-s in 30 s,
  // and each rendering asks every serving engine for its own /metrics.
  let cached: { atMs: number; text: Promise<string> } | undefined;
  const render = (): Promise<string> => {
    const now = performance.now();
    if (!cached || now - cached.atMs >= (opts.renderCacheMs ?? RENDER_CACHE_MS)) {
      const text = registry.metrics();
      cached = { atMs: now, text };
      text.catch(() => {
        if (cached?.text === text) cached = undefined;
      });
    }
    return cached.text;
  };
  // The time the next /metrics answer may be sent: each answer takes the next free turn.
  const turnMs = 1000 / (opts.scrapesPerSecond ?? SCRAPES_PER_SECOND);
  let nextTurnAtMs = 0;
  const waitForTurn = (): number => {
    const now = performance.now();
    const at = Math.max(now, nextTurnAtMs);
    nextTurnAtMs = at + turnMs;
    return at - now;
  };
  const waiting = new WeakSet<Socket>();
  const server = createServer({ headersTimeout: HEADERS_TIMEOUT_MS, requestTimeout: HEADERS_TIMEOUT_MS * 2 }, (req, res) => {
    const path = (req.url ?? '').split('?')[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
      return;
    }
    switch (path) {
      case '/metrics': {
        // One turn per connection at a time: a scraper never pipelines, and queued requests would push every turn back.
        if (waiting.has(req.socket)) {
          req.socket.destroy();
          return;
        }
        waiting.add(req.socket);
        res.once('close', () => waiting.delete(req.socket));
        const answer = () => {
          // A scraper gone while it waited costs no rendering.
          if (res.destroyed) return;
          render()
            .then((text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text))
            .catch(() => res.writeHead(500).end());
        };
        const waitMs = waitForTurn();
        if (waitMs <= 0) answer();
        else setTimeout(answer, waitMs).unref();
        return;
      }
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
  // Half-sent requests were all still open after 70 s (3000 fds): a scraper needs a few connections, not thousands.
  server.maxConnections = MAX_CONNECTIONS;
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err) => reject(failure(`cannot serve metrics on ${addr}: ${err.message}`, { cause: err })));
    server.listen(port, host, resolve);
  });
  return server;
}
