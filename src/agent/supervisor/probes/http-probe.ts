import { type Agent, type ClientRequest, type RequestOptions, request } from 'node:http';
import { urlToHttpOptions } from 'node:url';
import { errnoCode, errorMessage } from '../../../lib/errors.js';

/** Limit for one probe request; a hung engine must not stall the probe loop. */
export const PROBE_TIMEOUT_MS = 3000;
/** Largest /health or /v1/models answer read: a model list is a few KiB. */
export const PROBE_BODY_MAX_BYTES = 64 * 1024;
/** Largest /metrics answer read: vLLM's histograms for a busy engine are a few hundred KiB. */
export const METRICS_BODY_MAX_BYTES = 4 * 1024 * 1024;

/**
 * The cap for a URL when the caller gives none. Whoever binds an engine's
 * port first answers these requests, a local unprivileged user included: a
 * 600 MB answer made Buffer.toString throw ERR_STRING_TOO_LONG outside any
 * catch and killed the root agent (review finding 2).
 */
export function bodyCapFor(url: string): number {
  // The path without its query or fragment, found without a URL object: a
  // URL parse per request was a tenth of a probe's own CPU at 64 shards.
  const end = url.search(/[?#]/);
  const path = end === -1 ? url : url.slice(0, end);
  return path.endsWith('/metrics') ? METRICS_BODY_MAX_BYTES : PROBE_BODY_MAX_BYTES;
}

/** Parsed request targets, by URL: a shard's few URLs are asked every health interval for its life. */
const targets = new Map<string, RequestOptions>();
/** More URLs than any node asks (a few per shard): past this the map starts again rather than grow. */
const MAX_TARGETS = 1024;

/**
 * `url` as http.request's options, parsed once: a URL parse and its
 * conversion on every probe were a twentieth of the probes' CPU at 64 shards
 * beside the floor's plain options (bench figure 16).
 */
function targetOf(url: string): RequestOptions {
  let t = targets.get(url);
  if (t === undefined) {
    if (targets.size >= MAX_TARGETS) targets.clear();
    t = urlToHttpOptions(new URL(url));
    targets.set(url, t);
  }
  return t;
}

export interface HttpResult {
  status: number;
  body: string;
}

/** The errors of a request written to a connection the server had already closed: nothing of it was read. */
const CLOSED_BY_PEER = new Set(['ECONNRESET', 'EPIPE']);

/** Connections opened before the request that goes on them (tick-connection.ts), retried as kept-alive ones are. */
export const openedBeforeRequest = new WeakSet<object>();

/**
 * GET with a hard limit, on a fresh connection unless the caller gives a
 * keep-alive `agent` (the health watch's, for the /metrics read that follows
 * its /health within one tick, health-watch.ts): a probe must see the engine
 * as a new client would.
 *
 * A GET sent on a kept-alive connection that the server closed meanwhile
 * (an engine's keep-alive timeout, its FIN not yet read by the agent when
 * the request was written), or on one opened before it (openedBeforeRequest),
 * fails with ECONNRESET or EPIPE before any answer:
 * that is not the engine failing, and it is sent once more on a fresh
 * connection, within the same limit. An error after the answer began, or on
 * a fresh connection, is the engine's, as before.
 *
 * The limit is a plain referenced setTimeout that destroys the request, held
 * by this closure until it fires or the answer is read, not
 * AbortSignal.timeout() combined with AbortSignal.any(): on Node 20 a timeout
 * signal that only the combined signal refers to can be garbage-collected
 * before it fires, and the probe of a hung engine then waits for ever, which
 * silently ends health checking for that shard (seen as a flaky test under
 * load). The caller's signal destroys the request too, with an AbortError,
 * as the request's own `signal` option would. Neither goes through an
 * AbortController and the request's signal plumbing (src/lib/deadline.ts
 * did): those were a third of a probe's CPU beside the floor's plain GET
 * (bench figure 16, 64 shards each probed every health interval).
 */
export function httpGet(
  url: string,
  opts: { timeoutMs: number; signal?: AbortSignal; maxBytes?: number; headers?: Record<string, string>; post?: { json: string }; agent?: Agent },
): Promise<HttpResult> {
  const maxBytes = opts.maxBytes ?? bodyCapFor(url);
  const parent = opts.signal;
  return new Promise((resolve, reject) => {
    if (parent?.aborted) {
      reject(new RequestAbortedError(parent.reason));
      return;
    }
    let settled = false;
    const settle = () => {
      settled = true;
      clearTimeout(timer);
      parent?.removeEventListener('abort', onAbort);
    };
    const ok = (v: HttpResult) => {
      if (settled) return;
      settle();
      resolve(v);
    };
    const fail = (err: unknown) => {
      if (settled) return;
      settle();
      reject(err);
    };
    // A POST (opts.post) is the known-answer check's generation: the same limits, a JSON body, never sent twice.
    const method = opts.post ? 'POST' : 'GET';
    const headers = opts.post ? { ...opts.headers, 'content-type': 'application/json' } : opts.headers;
    let req: ClientRequest;
    const send = (agent: Agent | false) => {
      let answered = false;
      const sent = request({ ...targetOf(url), method, agent, headers }, (res) => {
        answered = true;
        const chunks: Buffer[] = [];
        let bytes = 0;
        const declared = Number(res.headers['content-length']);
        if (Number.isFinite(declared) && declared > maxBytes) {
          fail(tooLarge(`${declared} bytes`, maxBytes));
          sent.destroy();
          return;
        }
        res.on('data', (c: Buffer) => {
          bytes += c.length;
          // Past the cap the rest is never read: destroying the request stops the transfer.
          if (bytes > maxBytes) {
            chunks.length = 0;
            fail(tooLarge(`over ${maxBytes} bytes`, maxBytes));
            sent.destroy();
            return;
          }
          chunks.push(c);
        });
        res.on('end', () => ok({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', fail);
        // A response cut off mid-body (engine stopped, probe timed out) may end
        // with 'close' alone; without this the probe would wait forever.
        res.on('close', () => {
          if (!res.complete) fail(new Error('response closed before it was complete'));
        });
      });
      sent.on('error', (err) => {
        const early = sent.reusedSocket || (sent.socket !== null && openedBeforeRequest.has(sent.socket));
        if (!settled && agent !== false && method === 'GET' && early && !answered && CLOSED_BY_PEER.has(errnoCode(err) ?? '')) {
          send(false);
          return;
        }
        fail(err);
      });
      req = sent;
      sent.end(opts.post?.json);
    };
    // Referenced, as deadlines are (src/lib/deadline.ts): whoever awaits the probe hears its end or its limit.
    const timer = setTimeout(() => {
      fail(new ProbeTimeoutError(opts.timeoutMs));
      req.destroy();
    }, opts.timeoutMs);
    const onAbort = () => {
      fail(new RequestAbortedError(parent?.reason));
      req.destroy();
    };
    parent?.addEventListener('abort', onAbort, { once: true });
    send(opts.agent ?? false);
  });
}

/** The caller's signal ended the request: named as Node names an aborted request's error. */
class RequestAbortedError extends Error {
  readonly code = 'ABORT_ERR';
  constructor(reason: unknown) {
    super('The operation was aborted', { cause: reason });
    this.name = 'AbortError';
  }
}

/** The engine did not answer within the probe's limit. */
class ProbeTimeoutError extends Error {
  constructor(timeoutMs: number) {
    super(`no answer in ${timeoutMs} ms`);
    this.name = 'TimeoutError';
  }
}

/** Whatever answers with more than a probe reads is not an engine answering a probe. */
class ResponseTooLargeError extends Error {
  constructor(size: string, maxBytes: number) {
    super(`the answer is ${size}; at most ${maxBytes} are read`);
    this.name = 'ResponseTooLargeError';
  }
}

const tooLarge = (size: string, maxBytes: number) => new ResponseTooLargeError(size, maxBytes);

export type ProbeResult =
  | { ok: true }
  /** Not ready; `loading` when the port is not open yet, which is how vLLM says it is still loading. */
  | { ok: false; loading: boolean; reason: string };

/** Turns a transport error into a probe result, by what the errno means for an engine. */
function probeFailure(what: string, err: unknown): ProbeResult {
  const code = errnoCode(err);
  // ECONNREFUSED: nothing listens yet. vLLM opens its port only once the
  // model is loaded, so this is the normal state of a loading engine.
  if (code === 'ECONNREFUSED') return { ok: false, loading: true, reason: `${what}: connection refused (still loading)` };
  // An abort from the timeout: the process is there but does not answer,
  // the signature of a hung collective.
  if (err instanceof ProbeTimeoutError || (err instanceof Error && err.name === 'AbortError')) {
    return { ok: false, loading: false, reason: `${what}: no answer in time` };
  }
  if (err instanceof ResponseTooLargeError) return { ok: false, loading: false, reason: `${what}: ${err.message}` };
  // ECONNRESET and the rest: answered badly; not ready, try again.
  return { ok: false, loading: false, reason: `${what}: ${code ?? errorMessage(err)}` };
}

export interface ProbeOptions {
  timeoutMs: number;
  signal?: AbortSignal;
  /** A keep-alive agent whose connection later GETs of the same tick reuse (httpGet); a fresh connection when absent. */
  agent?: Agent;
  /** The engine's health path; /health when not said (SGLang's API rank: /health_generate). */
  healthPath?: string;
}

/** GET <healthPath> answers 200. */
export async function probeHealth(baseUrl: string, opts: ProbeOptions): Promise<ProbeResult> {
  const what = `GET ${opts.healthPath ?? '/health'}`;
  try {
    const r = await httpGet(`${baseUrl}${opts.healthPath ?? '/health'}`, opts);
    if (r.status === 200) return { ok: true };
    return { ok: false, loading: false, reason: `${what} answered ${r.status}` };
  } catch (err) {
    opts.signal?.throwIfAborted();
    return probeFailure(what, err);
  }
}

/**
 * The header that carries the engine's API key: both engines take a bearer
 * token (V:vllm/entrypoints/serve/middleware/authenticate.py; S:python/sglang/srt/utils/auth.py).
 * Only /v1 paths get it: /health and /metrics are open on both, and a key
 * sent nowhere it is needed is a key that can leak nowhere.
 */
export function bearer(apiKey: string): Record<string, string> | undefined {
  return apiKey ? { authorization: `Bearer ${apiKey}` } : undefined;
}

/**
 * Ready means serving this model: /health alone turns 200 in some engines
 * before the model is registered, and a router sent there gets 404s.
 */
export async function probeReady(
  baseUrl: string,
  servedModelName: string,
  opts: ProbeOptions & { apiKey?: string },
): Promise<ProbeResult> {
  // Both at once: READY is reported one round trip sooner, and an engine
  // that answers /health is asked nothing it would not be asked anyway.
  const models = httpGet(`${baseUrl}/v1/models`, { ...opts, headers: bearer(opts.apiKey ?? '') }).then(
    (r) => ({ r }),
    (err: unknown) => ({ err }),
  );
  const health = await probeHealth(baseUrl, opts);
  const answer = await models;
  if (!health.ok) return health;
  if ('err' in answer) {
    opts.signal?.throwIfAborted();
    return probeFailure('GET /v1/models', answer.err);
  }
  const r = answer.r;
  if (r.status === 401) {
    const sent = opts.apiKey ? "refused the profile's API key" : 'wants an API key the agent was not given (set it with --api-key in the profile args, or VLLM_API_KEY)';
    return { ok: false, loading: false, reason: `GET /v1/models answered 401: the engine ${sent}` };
  }
  if (r.status !== 200) return { ok: false, loading: false, reason: `GET /v1/models answered ${r.status}` };
  const ids = modelIds(r.body);
  if (ids.includes(servedModelName)) return { ok: true };
  return {
    ok: false,
    loading: false,
    reason: `GET /v1/models does not list ${JSON.stringify(servedModelName)} (it lists ${JSON.stringify(ids)})`,
  };
}

function modelIds(body: string): string[] {
  try {
    const parsed = JSON.parse(body) as { data?: { id?: unknown }[] };
    return (parsed.data ?? []).map((m) => m.id).filter((id): id is string => typeof id === 'string');
  } catch {
    return [];
  }
}
