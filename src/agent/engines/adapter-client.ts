/**
 * The agent's client of an engine's LoRA adapter API: it executes the data
 * of an EngineAdapterApi (src/lib/engine-adapter-api.ts) against one
 * engine, so an adopted engine is driven by the API it was launched with.
 * Every call ends by its caller's signal or, without one, by a safety
 * timeout: an engine whose unload never returns (SGLang #36894) must not
 * hold the reconciler for ever.
 */
import { deadlineSignal } from '../../lib/deadline.js';
import type { EngineAdapterApi } from '../../lib/engine-adapter-api.js';

export interface AdapterTarget {
  baseUrl: string;
  apiKey?: string;
  api: EngineAdapterApi;
  /** The safety limit of each call, whatever the caller's signal (default ADAPTER_CALL_TIMEOUT_MS). Added beside the contract's fields. */
  callTimeoutMs?: number;
}

/** The safety limit of a call: an engine load reads the adapter from disk, an SGLang unload waits for its requests. */
export const ADAPTER_CALL_TIMEOUT_MS = 120_000;

/** A call the engine refused or never answered: its HTTP status (undefined: no answer) and its own words. */
export class AdapterCallError extends Error {
  readonly status: number | undefined;
  readonly engineReason: string;

  constructor(message: string, status: number | undefined, engineReason: string) {
    super(message);
    this.name = 'AdapterCallError';
    this.status = status;
    this.engineReason = engineReason;
  }
}

interface CallOptions {
  signal?: AbortSignal;
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * The engine's reason out of an error body: vLLM's ErrorResponse
 * {error: {message}} (V:vllm/entrypoints/serve/exception_handling/error_response.py:87-95),
 * SGLang's LoRAUpdateOutput {success: false, error_message}
 * (S:python/sglang/srt/managers/io_struct.py:2169-2172), FastAPI's {detail},
 * else the text itself (cut to one line).
 */
export function engineReasonOf(text: string): string {
  let reason = text;
  try {
    const body = JSON.parse(text) as unknown;
    if (isRecord(body)) {
      if (isRecord(body.error) && typeof body.error.message === 'string') reason = body.error.message;
      else if (typeof body.error_message === 'string') reason = body.error_message;
      else if (typeof body.message === 'string') reason = body.message;
      else if (typeof body.detail === 'string') reason = body.detail;
      else if (typeof body.error === 'string') reason = body.error;
    }
  } catch {
    // not JSON: the text is the reason
  }
  return reason.replace(/\s+/g, ' ').trim().slice(0, 500);
}

async function call(t: AdapterTarget, method: 'GET' | 'POST', path: string, what: string, body: unknown, opts: CallOptions | undefined): Promise<{ status: number; text: string }> {
  const headers: Record<string, string> = {};
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (t.apiKey) headers.authorization = `Bearer ${t.apiKey}`;
  const url = `${t.baseUrl.replace(/\/+$/, '')}${path}`;
  const limitMs = t.callTimeoutMs ?? ADAPTER_CALL_TIMEOUT_MS;
  // A deadline that is certain to fire, not AbortSignal.any with AbortSignal.timeout (src/lib/deadline.ts).
  const deadline = deadlineSignal(limitMs, opts?.signal);
  try {
    const res = await fetch(url, { method, headers, signal: deadline.signal, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
    return { status: res.status, text: await res.text() };
  } catch (err) {
    const e = err as Error & { cause?: { code?: string; message?: string } };
    const why = deadline.expired ? `no answer within ${limitMs / 1000}s` : opts?.signal?.aborted ? 'the call was cancelled' : (e.cause?.code ?? e.cause?.message ?? e.message);
    throw new AdapterCallError(`${what}: ${method} ${path} got no answer (${why})`, undefined, why);
  } finally {
    deadline.clear();
  }
}

/**
 * Whether an answer to a load or an unload is a success: 2xx, and for an
 * engine that answers {success} (SGLang) success true; SGLang answers a
 * refusal 400 with success false (S:python/sglang/srt/entrypoints/http_server.py:1526-1527).
 */
function refused(t: AdapterTarget, r: { status: number; text: string }): boolean {
  if (r.status < 200 || r.status >= 300) return true;
  if (t.api.replies !== 'json-success') return false;
  try {
    const body = JSON.parse(r.text) as unknown;
    return !isRecord(body) || body.success !== true;
  } catch {
    return true;
  }
}

/** Loads adapter `name` from folder `dir`; throws AdapterCallError with the engine's words when it refuses. */
export async function loadAdapter(t: AdapterTarget, name: string, dir: string, opts?: { pinned?: boolean; signal?: AbortSignal }): Promise<void> {
  const { load } = t.api;
  const body: Record<string, unknown> = { [load.nameField]: name, [load.pathField]: dir };
  if (opts?.pinned) {
    if (!load.pinnedField) throw new AdapterCallError(`load of adapter ${name}: this engine cannot pin an adapter`, undefined, 'pinning not supported');
    body[load.pinnedField] = true;
  }
  const r = await call(t, 'POST', load.path, `load of adapter ${name}`, body, opts);
  if (refused(t, r)) {
    const reason = engineReasonOf(r.text);
    throw new AdapterCallError(`load of adapter ${name} refused (${r.status}): ${reason}`, r.status, reason);
  }
}

/** Unloads adapter `name`; throws AdapterCallError with the engine's words when it refuses. */
export async function unloadAdapter(t: AdapterTarget, name: string, opts?: { signal?: AbortSignal }): Promise<void> {
  const { unload } = t.api;
  const r = await call(t, 'POST', unload.path, `unload of adapter ${name}`, { [unload.nameField]: name }, opts);
  if (refused(t, r)) {
    const reason = engineReasonOf(r.text);
    throw new AdapterCallError(`unload of adapter ${name} refused (${r.status}): ${reason}`, r.status, reason);
  }
}

/**
 * The adapters the engine lists: the cards of its /v1/models with a parent
 * (both engines give an adapter's card parent = the base's name and leave
 * the base's parent null: V:vllm/entrypoints/openai/models/serving.py:149-165,
 * S:python/sglang/srt/entrypoints/http_server.py:1823-1852).
 */
export async function listLoadedAdapters(t: AdapterTarget, opts?: { signal?: AbortSignal }): Promise<string[]> {
  const r = await call(t, 'GET', t.api.list.path, 'list of adapters', undefined, opts);
  if (r.status !== 200) {
    const reason = engineReasonOf(r.text);
    throw new AdapterCallError(`list of adapters: ${t.api.list.path} answered ${r.status}: ${reason}`, r.status, reason);
  }
  let body: unknown;
  try {
    body = JSON.parse(r.text);
  } catch {
    throw new AdapterCallError(`list of adapters: ${t.api.list.path} answered no JSON`, r.status, 'not JSON');
  }
  if (!isRecord(body) || !Array.isArray(body.data)) throw new AdapterCallError(`list of adapters: ${t.api.list.path} has no data list`, r.status, 'no data list');
  return body.data.filter((c): c is Record<string, unknown> => isRecord(c) && typeof c.id === 'string' && typeof c.parent === 'string' && c.parent !== '').map((c) => c.id as string);
}

/**
 * The adapters with requests in the engine, by name; undefined when the
 * engine does not say (no metric in its API, or the metric absent: vLLM
 * writes it only with LoRA on and stats logged).
 *
 * vLLM's `vllm:lora_requests_info` is one gauge series per label set, its
 * value the time it was set, the label sets never removed: the newest
 * series is the state, and its labels name the adapters with running and
 * with waiting requests, comma-joined, without counts
 * (V:vllm/v1/metrics/loggers.py:1065-1074, 1167-1179). A name there counts
 * 1, meaning "at least one". An adapter absent from the map has none.
 */
export async function adapterRequestsInFlight(t: AdapterTarget, opts?: { signal?: AbortSignal }): Promise<ReadonlyMap<string, { running: number; waiting: number }> | undefined> {
  const metric = t.api.inFlightMetric;
  if (!metric) return undefined;
  const r = await call(t, 'GET', '/metrics', 'adapters in flight', undefined, opts);
  if (r.status !== 200) throw new AdapterCallError(`adapters in flight: /metrics answered ${r.status}`, r.status, engineReasonOf(r.text));
  return parseLoraRequestsInfo(r.text, metric);
}

const LABEL = /([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

/** The newest series of an info gauge like vllm:lora_requests_info, as adapters in flight; undefined when absent. */
export function parseLoraRequestsInfo(text: string, metric: string): Map<string, { running: number; waiting: number }> | undefined {
  let newest: { value: number; labels: Map<string, string> } | undefined;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${metric}{`)) continue;
    const close = line.lastIndexOf('}');
    const value = Number(line.slice(close + 1).trim().split(/\s+/)[0]);
    if (!Number.isFinite(value) || (newest && newest.value >= value)) continue;
    const labels = new Map<string, string>();
    for (const m of line.slice(metric.length + 1, close).matchAll(LABEL)) labels.set(m[1] as string, (m[2] as string).replace(/\\(.)/g, '$1'));
    newest = { value, labels };
  }
  if (!newest) return undefined;
  const out = new Map<string, { running: number; waiting: number }>();
  const names = (label: string) => (newest?.labels.get(label) ?? '').split(',').filter((n) => n !== '');
  for (const n of names('running_lora_adapters')) out.set(n, { running: 1, waiting: out.get(n)?.waiting ?? 0 });
  for (const n of names('waiting_lora_adapters')) out.set(n, { running: out.get(n)?.running ?? 0, waiting: 1 });
  return out;
}
