/**
 * The vLLM double's HTTP routes: its API key check, /health, /metrics,
 * /version, /load, sleep mode's routes (fake-vllm-sleep.ts), /v1/models and
 * the OpenAI routes. The engine (fake-vllm.ts) owns the state they answer from.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { type RouteContext, bearerOk, serveEmbedding, serveGeneration } from './fake-openai-routes.js';
import type { FakeVllmOptions } from './fake-vllm-args.js';
import type { FakeVllmLora } from './fake-vllm-lora.js';
import type { FakeVllmMetrics } from './fake-vllm-metrics.js';
import type { FakeVllmSleep } from './fake-vllm-sleep.js';
import type { VllmState } from './fake-vllm-state.js';
import { errorBody, modelList } from './openai-responses.js';
import { sendJson } from './sim-http.js';

export interface VllmRouteDeps {
  o: FakeVllmOptions;
  /** The engine's state: the routes only read it. */
  st: VllmState;
  startedS: number;
  /** The first --served-model-name. */
  servedName: string;
  metrics: FakeVllmMetrics;
  sleepMode: FakeVllmSleep | undefined;
  ctx: RouteContext;
  /** LoRA adapters: their routes, cards and metric (fake-vllm-lora.ts). */
  lora: FakeVllmLora;
}

/** The request handler of the API server. */
export function vllmHandler(d: VllmRouteDeps): (req: IncomingMessage, res: ServerResponse) => void {
  const { o, st, startedS, servedName, metrics, sleepMode, ctx, lora } = d;
  let httpInFlight = 0;

  return (req: IncomingMessage, res: ServerResponse) => {
    if (st.hung) return; // a hung engine accepts the connection and says nothing
    const path = (req.url ?? '/').split('?')[0] as string;
    const method = req.method ?? 'GET';
    // V:vllm/entrypoints/serve/middleware/authenticate.py:11, 59: every path under /v1 needs the key.
    if (o.apiKeys.length > 0 && path.startsWith('/v1') && method !== 'OPTIONS' && !bearerOk(req, o.apiKeys)) {
      sendJson(res, 401, { error: 'Unauthorized' });
      return;
    }
    // /health is 503 once the engine is dead (V:vllm/entrypoints/serve/instrumentator/health.py:22-33):
    // check_health looks only at `errored` (V:vllm/v1/engine/async_llm.py:940-943), so a drain keeps it 200.
    if (method === 'GET' && (path === '/health' || path === '/ping')) {
      res.writeHead(st.phase === 'serving' || st.phase === 'draining' ? 200 : 503, { 'content-length': '0' }).end();
      return;
    }
    if (method === 'GET' && path === '/metrics') {
      res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' }).end(metrics.text(sleepMode) + lora.metricsText(o.logStats));
      return;
    }
    if (method === 'GET' && path === '/version') {
      sendJson(res, 200, { version: o.version }); // V:vllm/entrypoints/serve/instrumentator/basic.py:53-56
      return;
    }
    if (method === 'GET' && path === '/load' && o.loadTracking) {
      sendJson(res, 200, { server_load: httpInFlight }); // V:vllm/entrypoints/serve/instrumentator/basic.py:30-50
      return;
    }
    if (sleepMode?.handle(req, res, path, method)) return;
    if (st.phase === 'serving' && lora.handle(req, res, path, method)) return;
    if (method === 'GET' && path === '/v1/models') {
      const list = modelList(servedName, startedS);
      list.data = [...o.servedNames.map((n) => ({ ...list.data[0]!, id: n, root: o.model })), ...(lora.cards(servedName, startedS) as (typeof list.data)[number][])];
      sendJson(res, 200, list);
      return;
    }
    const generation = method === 'POST' && (path === '/v1/chat/completions' || path === '/v1/completions') && o.runner === 'generate';
    const embedding = method === 'POST' && path === '/v1/embeddings' && o.runner === 'pooling';
    if (!generation && !embedding) {
      sendJson(res, 404, { detail: 'Not Found' });
      return;
    }
    if (st.phase === 'draining') {
      // The API server still takes the request; the shutting-down EngineCore rejects it and it finishes
      // aborted (V:vllm/v1/engine/core.py:1555-1568). Stood in for by an error answer: no token is made.
      sendJson(res, 503, errorBody('The server is shutting down.', 'ServiceUnavailableError', 503), true);
      return;
    }
    if (st.phase !== 'serving') {
      sendJson(res, 500, errorBody('EngineCore encountered an issue. See stack trace (above) for the root cause.', 'InternalServerError', 500), true);
      return;
    }
    // HTTP requests in flight in the API server, streaming out included (V:vllm/entrypoints/serve/instrumentator/basic.py:30-50).
    httpInFlight++;
    res.on('close', () => httpInFlight--);
    if (embedding) void serveEmbedding(req, res, ctx);
    else void serveGeneration(req, res, path === '/v1/chat/completions' ? 'chat' : 'text', ctx);
  };
}
