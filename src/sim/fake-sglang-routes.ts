/**
 * The SGLang double's HTTP routes: its auth middleware, /health and
 * /health_generate, the information routes, the OpenAI routes with their
 * prompts matched against the prefix cache, and the dummy health server of
 * ranks ≥ 1. The server (fake-sglang.ts) owns the state they answer from.
 */
import { type IncomingMessage, type Server, type ServerResponse, createServer } from 'node:http';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { sglangLog } from './engine-log.js';
import type { SchedRequest } from './fake-batch-scheduler.js';
import { type RouteContext, bearerOk, serveEmbedding, serveGeneration } from './fake-openai-routes.js';
import { promptWords } from './fake-radix-cache.js';
import { DEFAULT_SGLANG_VERSION, type FakeSglangOptions } from './fake-sglang-args.js';
import type { FakeSglangLora } from './fake-sglang-lora.js';
import type { FakeSglangMemorySaver } from './fake-sglang-memory-saver.js';
import type { FakeSglangMetrics } from './fake-sglang-metrics.js';
import type { FakeSglangPause } from './fake-sglang-pause.js';
import type { SglangState } from './fake-sglang-state.js';
import { errorBody } from './openai-responses.js';
import { readBody, sendJson } from './sim-http.js';

/** /health_generate sleeps this long before its first look (S:python/sglang/srt/entrypoints/http_server.py:654-711). */
const HEALTH_FIRST_LOOK_MS = 1000;
const HEALTH_POLL_MS = 1000;

/** SGLANG_HEALTH_CHECK_TIMEOUT's default, in seconds (S:python/sglang/srt/entrypoints/http_server.py:192). */
const DEFAULT_HEALTH_CHECK_TIMEOUT_S = 20;

/**
 * Routes marked @auth_level(AuthLevel.ADMIN_OPTIONAL) that the double serves
 * (S:python/sglang/srt/entrypoints/http_server.py:1235-1236, 1482-1483,
 * 1494-1495, 1506-1507, 1685-1686, 1698-1699).
 */
const ADMIN_OPTIONAL = new Set([
  '/update_weights_from_disk',
  '/release_memory_occupation',
  '/resume_memory_occupation',
  '/weights_checker',
  '/pause_generation',
  '/continue_generation',
  '/load_lora_adapter',
  '/unload_lora_adapter',
]);

/**
 * The three levels of SGLang's auth middleware, for a request to `path`
 * (S:python/sglang/srt/utils/auth.py:74-146; mounted only when a key is set,
 * http_server.py:2561-2574): /health* and /metrics* are always open (:100);
 * an ADMIN_OPTIONAL route takes the admin key when one is set, and then
 * never the API key, else the API key, else anyone (:123-138); any other
 * route takes the API key when one is set, else anyone, even with an admin
 * key set (:140-146). OPTIONS is always let through (:97-98).
 */
export function sglangAuthorized(o: Pick<FakeSglangOptions, 'apiKey' | 'adminApiKey'>, method: string, path: string, req: IncomingMessage): boolean {
  if (method === 'OPTIONS' || path.startsWith('/health') || path.startsWith('/metrics')) return true;
  if (ADMIN_OPTIONAL.has(path)) {
    if (o.adminApiKey) return bearerOk(req, [o.adminApiKey]);
    if (o.apiKey) return bearerOk(req, [o.apiKey]);
    return true;
  }
  return o.apiKey ? bearerOk(req, [o.apiKey]) : true;
}

const envFalse = (v: string | undefined) => v !== undefined && ['0', 'false', 'no', 'off'].includes(v.toLowerCase());

/** How long a /health_generate waits for any output: SGLANG_HEALTH_CHECK_TIMEOUT, in ms. */
export function healthCheckTimeoutMs(env: NodeJS.ProcessEnv): number {
  return Number(env.SGLANG_HEALTH_CHECK_TIMEOUT ?? DEFAULT_HEALTH_CHECK_TIMEOUT_S) * 1000;
}

export interface SglangRouteDeps {
  o: FakeSglangOptions;
  env: NodeJS.ProcessEnv;
  /** The server's state: the routes read it, and /health_generate sets `unhealthy`. */
  st: SglangState;
  startedS: number;
  healthTimeoutMs: number;
  memory: FakeSglangMemorySaver;
  pause: FakeSglangPause;
  metrics: FakeSglangMetrics;
  /** The OpenAI routes' context; its submit goes through the tokenizer (FakeSglangPause.submit). */
  ctx: RouteContext;
  /** LoRA adapters: their routes and cards (fake-sglang-lora.ts). */
  lora: FakeSglangLora;
  /** Marks a request with its prompt as it is submitted: its prefix cache hit, and what its prefill inserts. */
  prompt: (r: SchedRequest, words: string[]) => void;
}

/** The request handler of rank 0's API server. */
export function sglangHandler(d: SglangRouteDeps): (req: IncomingMessage, res: ServerResponse) => void {
  const { o, env, st, startedS, healthTimeoutMs, memory, pause, metrics, ctx } = d;

  /**
   * GET /health_generate: a 1-token generation, then the first look after
   * 1 s; 200 as soon as any output arrived since it started (and the
   * status Up again), 503 (and UnHealthy) after SGLANG_HEALTH_CHECK_TIMEOUT
   * without any (S:python/sglang/srt/entrypoints/http_server.py:654-725).
   * A client that gives up does not end it: a plain FastAPI handler is not
   * cancelled on disconnect, so a check a paused server holds still sets
   * UnHealthy at its own 20 s, after which a SIGTERM skips the drain
   * (tokenizer_manager.py:3123-3130; review engine-fidelity-2 N3).
   */
  const healthGenerate = async (res: ServerResponse) => {
    const tic = Date.now();
    const drop = ctx.submit({ promptTokens: 1, maxTokens: 1, finishReason: 'length', pooling: o.embedding, internal: true });
    await sleep(HEALTH_FIRST_LOOK_MS);
    for (;;) {
      if (st.phase === 'exiting') return;
      if (st.lastOutputAt > tic) {
        drop();
        st.unhealthy = false;
        if (!res.destroyed) res.writeHead(200, { 'content-length': '0' }).end();
        return;
      }
      if (Date.now() - tic > healthTimeoutMs) {
        st.unhealthy = true;
        drop();
        sglangLog('ERROR', `Health check failed. Server couldn't get a response from detokenizer for last ${healthTimeoutMs / 1000} seconds.`);
        if (!res.destroyed) res.writeHead(503, { 'content-length': '0' }).end();
        return;
      }
      await sleep(HEALTH_POLL_MS);
    }
  };

  const handle = (req: IncomingMessage, res: ServerResponse) => {
    if (st.hung) return;
    const path = (req.url ?? '/').split('?')[0] as string;
    const method = req.method ?? 'GET';
    // S:python/sglang/srt/utils/auth.py:187-198: a refusal is 401 {"error": "Unauthorized"}; /ping is not exempt.
    if (!sglangAuthorized(o, method, path, req)) {
      sendJson(res, 401, { error: 'Unauthorized' });
      return;
    }
    if (path === '/ping') {
      res.writeHead(200, { 'content-length': '0' }).end(); // S:python/sglang/srt/entrypoints/http_server.py:2023-2026
      return;
    }
    if (method === 'GET' && (path === '/health' || path === '/health_generate')) {
      // 503 while shutting down and while Starting (http_server.py:664-669).
      if (st.phase !== 'up') {
        res.writeHead(503, { 'content-length': '0' }).end();
        return;
      }
      // SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION defaults to true (S:python/sglang/srt/environ.py:319).
      if (path === '/health' && envFalse(env.SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION)) {
        res.writeHead(200, { 'content-length': '0' }).end();
        return;
      }
      void healthGenerate(res);
      return;
    }
    if (memory.handle(req, res, path, method)) return;
    if (d.lora.handle(req, res, path, method)) return;
    if (method === 'POST' && (path === '/pause_generation' || path === '/continue_generation')) {
      void pause.route(req, res, path === '/pause_generation');
      return;
    }
    if (method === 'GET' && path === '/metrics') {
      // Mounted only with --enable-metrics (http_server.py:285-287).
      if (!o.metrics) sendJson(res, 404, { detail: 'Not Found' });
      else res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' }).end(metrics.text() + d.lora.metricsText(`model_name="${o.servedName}",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0"`));
      return;
    }
    // The information routes answer from the tokenizer's own state, without a
    // generation, so a paused or released server answers them too (N3).
    if (method === 'GET' && path === '/v1/models') {
      // id and root = the tokenizer's served_model_name (S:python/sglang/srt/entrypoints/http_server.py:1843-1872).
      sendJson(res, 200, { object: 'list', data: [{ id: st.servedName, object: 'model', created: startedS, owned_by: 'sglang', root: st.servedName, max_model_len: 4096 }, ...d.lora.cards()] });
      return;
    }
    if (method === 'GET' && path === '/model_info') {
      // S:python/sglang/srt/entrypoints/http_server.py:738-773 (a subset of its fields).
      sendJson(res, 200, { model_path: st.modelPath, served_model_name: st.servedName, tokenizer_path: o.model, is_generation: !o.embedding, weight_version: 'default' });
      return;
    }
    if (method === 'GET' && path === '/server_info') {
      // The launch arguments and the schedulers' internal state, asked of the scheduler's
      // control path, which a pause does not stop (http_server.py:796-826; scheduler.py:1725-1729).
      sendJson(res, 200, { model_path: o.model, served_model_name: o.servedName, tp_size: o.tp, pp_size: o.pp, enable_memory_saver: o.memorySaver, enable_weights_cpu_backup: o.weightsCpuBackup, decode_log_interval: o.decodeLogInterval, internal_states: [{ last_gen_throughput: 0 }], version: DEFAULT_SGLANG_VERSION });
      return;
    }
    if (method === 'GET' && path === '/v1/loads') {
      sendJson(res, 200, metrics.loads());
      return;
    }
    const generation = method === 'POST' && (path === '/v1/chat/completions' || path === '/v1/completions') && !o.embedding;
    const embedding = method === 'POST' && path === '/v1/embeddings' && o.embedding;
    if (!generation && !embedding) {
      sendJson(res, 404, { detail: 'Not Found' });
      return;
    }
    // gracefully_exit is read only by /health: new requests are still taken while draining
    // (review: "new API requests are not refused during the drain", inferred from grep of http_server.py).
    if (st.phase === 'exiting') {
      sendJson(res, 503, errorBody('The server is not ready.', 'ServiceUnavailableError', 503), true);
      return;
    }
    if (embedding) void serveEmbedding(req, res, ctx);
    else void generate(req, res, path === '/v1/chat/completions' ? 'chat' : 'text');
  };

  /**
   * A completion, its prompt matched against the prefix cache first: the
   * body is read here and handed on, and the request this body submits
   * carries its cache hit to the prefill (fake-radix-cache.ts).
   */
  const generate = async (req: IncomingMessage, res: ServerResponse, kind: 'chat' | 'text') => {
    let text: string;
    try {
      text = await readBody(req);
    } catch {
      return;
    }
    let words: string[] = [];
    try {
      const body = JSON.parse(text) as unknown;
      if (body && typeof body === 'object' && !Array.isArray(body)) words = promptWords(body as Record<string, unknown>);
    } catch {
      // serveGeneration answers the 400.
    }
    const replay = Object.assign(Readable.from([Buffer.from(text)]), { headers: req.headers, method: req.method, url: req.url }) as unknown as IncomingMessage;
    const own: RouteContext = {
      get servedNames() {
        return ctx.servedNames;
      },
      defaultMaxTokens: ctx.defaultMaxTokens,
      weightsLost: ctx.weightsLost,
      refuse: ctx.refuse,
      lora: ctx.lora,
      submit: (r) => {
        d.prompt(r, words);
        return ctx.submit(r);
      },
    };
    await serveGeneration(replay, res, kind, own);
  };

  return handle;
}

/**
 * Ranks ≥ 1: no API, but once the schedulers are ready a dummy server on
 * --host:--port answers /health, /health_generate and /ping with 200,
 * and /metrics with --enable-metrics; a taken port is logged and not
 * fatal (S:python/sglang/srt/entrypoints/engine.py:1150-1169;
 * S:python/sglang/srt/utils/common.py:3273-3330).
 */
export function startDummyServer(o: FakeSglangOptions, metrics: FakeSglangMetrics): Server {
  const dummy = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0] as string;
    if (path === '/health' || path === '/health_generate' || path === '/ping') res.writeHead(200, { 'content-length': '0' }).end();
    else if (path === '/metrics' && o.metrics) res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' }).end(metrics.text());
    else sendJson(res, 404, { detail: 'Not Found' });
  });
  dummy.on('error', (err) => sglangLog('ERROR', `Failed to start the dummy health server on ${o.host}:${o.port}: ${err.message}`));
  dummy.listen(o.port, o.host, () => sglangLog('INFO', `Dummy health server for node rank ${o.nodeRank} on http://${o.host}:${o.port}`));
  return dummy;
}
