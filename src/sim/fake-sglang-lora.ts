/**
 * The SGLang double's LoRA adapters, as SGLang 6ed5780c (the bytedance-iaas
 * fork's head; S:path:line at that commit) serves them:
 *
 * - the tokenizer's LoRARegistry, names in LRU order, lookups counting as
 *   use, a counter of the requests using each adapter
 *   (S:python/sglang/srt/lora/lora_registry.py:65-263), and its lora_ref_cache
 *   of every name ever loaded, which a request naming an unloaded adapter
 *   loads again from (S:python/sglang/srt/managers/tokenizer_manager.py:3292-3339);
 * - /load_lora_adapter and /unload_lora_adapter, one at a time under
 *   lora_update_lock, a load beyond --max-loaded-loras unloading the least
 *   recently used unpinned adapter, an unload waiting for the adapter's
 *   requests to end (S:python/sglang/srt/managers/tokenizer_control_mixin.py:565-663, 741-769);
 * - the memory pool's checks (S:python/sglang/srt/lora/lora_manager.py:270-313);
 * - `model: "<base>:<adapter>"` or `lora_path` naming the adapter
 *   (S:python/sglang/srt/entrypoints/openai/serving_base.py:40-71);
 * - the counter of a request with n > 1 released once more than acquired
 *   (the parallel-sampling prefix-cache request: SGLang #25864, PR #31808),
 *   so an unload of that adapter waits for ever for a zero it never sees,
 *   and, as SGLang #36894 observed ("Start unload Lora adapter" the last
 *   line, nothing scheduled again, the process alive), no batch is
 *   scheduled again;
 * - --sim-lora-name-keyed-pool: the GPU memory pool keyed by adapter name,
 *   as before PR #8261 (SGLang #8263, "LoRA buffer not correctly evicted
 *   when LoRA names are reused"): a name loaded again with new weights finds
 *   its buffer resident and is served the old weights. At 6ed5780c the pool
 *   is keyed by the registry's lora_id, a uuid4 per load
 *   (S:python/sglang/srt/lora/lora_registry.py:37), and a buffer is filled
 *   only for an id not resident (S:python/sglang/srt/lora/mem_pool.py:808-821).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { sglangLog } from './engine-log.js';
import type { FakeBatchScheduler, SchedRequest } from './fake-batch-scheduler.js';
import { type AdapterFiles, type LoraPick, type LoraRoutes, once, readAdapterFiles } from './fake-lora.js';
import { readBody, sendJson } from './sim-http.js';

export interface SglangLoraOptions {
  /** --enable-lora, or --lora-paths given (S:python/sglang/srt/server_args.py:8911-8921). */
  enabled: boolean;
  /** --max-lora-rank (server_args.py:2771-2775). */
  maxRank?: number;
  /** --max-loaded-loras (server_args.py:2794-2798); undefined: no limit. */
  maxLoaded?: number;
  /** --max-loras-per-batch, default 8 (server_args.py:2799-2803). */
  perBatch: number;
  /** --lora-paths NAME=PATH ..., loaded at start, unpinned (server_args.py:8985-8997). */
  paths: { name: string; path: string }[];
  /** --sim-lora-name-keyed-pool (SGLang #8263). */
  nameKeyedPool?: boolean;
}

interface Ref {
  id: string;
  name: string;
  path: string;
  pinned: boolean;
  files: AdapterFiles;
  /** Requests using it (ConcurrentCounter); below zero after n > 1 traffic. */
  counter: number;
}

const keys = (m: Map<string, unknown>) => `odict_keys([${[...m.keys()].map((k) => `'${k}'`).join(', ')}])`;

export class FakeSglangLora implements LoraRoutes {
  readonly #o: SglangLoraOptions;
  readonly #servedName: () => string;
  readonly #scheduler: FakeBatchScheduler;
  /** Registered adapters, least recently used first. */
  readonly #registry = new Map<string, Ref>();
  /** Every adapter ever loaded, by name (lora_ref_cache: never emptied). */
  readonly #refCache = new Map<string, { path: string; pinned: boolean }>();
  /** Waiters on a counter reaching zero, by adapter id. */
  readonly #zero = new Map<string, () => void>();
  /** lora_update_lock: loads and unloads one after another. */
  #lock: Promise<unknown> = Promise.resolve();
  #nextId = 0;
  /** --sim-lora-name-keyed-pool: the buffers resident, by name (least recently used first), and what each holds. */
  readonly #namePool = new Map<string, string>();

  constructor(o: SglangLoraOptions, servedName: () => string, scheduler: FakeBatchScheduler) {
    this.#o = o;
    this.#servedName = servedName;
    this.#scheduler = scheduler;
  }

  /** The --lora-paths adapters, read before the server answers; a message when one cannot be. */
  async start(): Promise<string | undefined> {
    for (const { name, path } of this.#o.paths) {
      const r = await this.#loadLocked(name, path, false);
      if (!r.success) return r.error_message ?? 'failed';
    }
    return undefined;
  }

  /**
   * The scheduler's rule: the running batch's adapters with this one, the
   * base counting as one (None), at most --max-loras-per-batch; one already
   * running always joins (S:python/sglang/srt/managers/scheduler.py:3355-3381;
   * S:python/sglang/srt/lora/lora_manager.py:361-366).
   */
  admits = (req: SchedRequest, running: readonly SchedRequest[]): boolean => {
    if (!this.#o.enabled) return true;
    const ids = new Set(running.map((r) => r.lora?.slot ?? ''));
    if (ids.has(req.lora?.slot ?? '')) return true;
    return ids.size + 1 <= this.#o.perBatch;
  };

  /**
   * With --enable-metrics: the LoRA pool's gauges, slots used = the distinct
   * adapters in the running batch, total = --max-loras-per-batch
   * (S:python/sglang/srt/observability/metrics_collector.py:606-626, 1353-1357;
   * scheduler_components/metrics_reporter.py:1041-1055). No series per adapter.
   */
  metricsText(labels: string): string {
    if (!this.#o.enabled) return '';
    const used = new Set(this.#scheduler.snapshot().running.flatMap((r) => (r.lora ? [r.lora.slot] : []))).size;
    const g = (name: string, help: string, v: number) => `# HELP ${name} ${help}\n# TYPE ${name} gauge\n${name}{${labels}} ${v.toFixed(1)}\n`;
    return (
      g('sglang:lora_pool_slots_used', 'Number of LoRA adapter slots currently occupied in GPU memory.', used) +
      g('sglang:lora_pool_slots_total', 'Total number of LoRA adapter slots available (max_loras_per_batch).', this.#o.perBatch) +
      g('sglang:lora_pool_utilization', 'LoRA pool utilization ratio (used/total). 1.0 means pool is full.', used / this.#o.perBatch)
    );
  }

  /** The cards /v1/models adds (S:python/sglang/srt/entrypoints/http_server.py:1839-1850). */
  cards(): Record<string, unknown>[] {
    if (!this.#o.enabled) return [];
    return [...this.#registry.values()].map((r) => ({ id: r.name, object: 'model', owned_by: 'sglang', root: r.path, parent: this.#servedName(), max_model_len: null }));
  }

  /** The routes; false when `path` is none of them. */
  handle(req: IncomingMessage, res: ServerResponse, path: string, method: string): boolean {
    if (method === 'GET' && path === '/sim/loras') {
      // Not SGLang's: the registry with its counters, for tests.
      sendJson(res, 200, { registry: [...this.#registry.values()].map((r) => ({ name: r.name, pinned: r.pinned, counter: r.counter })) });
      return true;
    }
    // @app.api_route(methods=["POST"]) (http_server.py:1519-1550).
    if (method !== 'POST' || (path !== '/load_lora_adapter' && path !== '/unload_lora_adapter')) return false;
    void this.#route(req, res, path === '/load_lora_adapter');
    return true;
  }

  async #route(req: IncomingMessage, res: ServerResponse, load: boolean): Promise<void> {
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(await readBody(req)) as Record<string, unknown>;
      if (!body || typeof body !== 'object') throw new Error('not an object');
    } catch {
      return sendJson(res, 422, { detail: [{ type: 'json_invalid', loc: ['body'], msg: 'JSON decode error' }] });
    }
    const name = typeof body.lora_name === 'string' ? body.lora_name : undefined;
    if (name === undefined || (load && typeof body.lora_path !== 'string')) {
      return sendJson(res, 422, { detail: [{ type: 'missing', loc: ['body', name === undefined ? 'lora_name' : 'lora_path'], msg: 'Field required' }] });
    }
    // ValueError → success false (tokenizer_control_mixin.py:594-598, 659-663, 748-752, 768-769); status 400 (http_server.py:1526).
    const out = (r: { success: boolean; error_message: string | null }) => sendJson(res, r.success ? 200 : 400, { ...r, loaded_adapters: this.#loaded() });
    if (!this.#o.enabled) return out({ success: false, error_message: 'LoRA is not enabled. Please set `--enable-lora` to enable LoRA.' });
    if (load) {
      sglangLog('INFO', `Start load Lora adapter. Lora name=${name}, path=${String(body.lora_path)}`);
      out(await this.#locked(() => this.#loadLocked(name, String(body.lora_path), body.pinned === true)));
    } else {
      sglangLog('INFO', `Start unload Lora adapter. Lora name=${name}`);
      out(await this.#locked(() => this.#unloadLocked(name)));
    }
  }

  #loaded(): Record<string, string> {
    return Object.fromEntries([...this.#registry.values()].map((r) => [r.name, r.path]));
  }

  #locked<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#lock.then(fn);
    this.#lock = run.catch(() => {});
    return run;
  }

  /** tokenizer_control_mixin.py:609-663 with the memory pool's checks (lora_manager.py:233-313). */
  async #loadLocked(name: string, path: string, pinned: boolean): Promise<{ success: boolean; error_message: string | null }> {
    let files: AdapterFiles;
    try {
      files = await readAdapterFiles(path);
    } catch (err) {
      // Not a local folder: LoRAConfig asks the hub for it (S:python/sglang/srt/lora/lora_config.py:75-80); the double never downloads.
      return { success: false, error_message: `Repository Not Found for url: https://huggingface.co/api/models/${path} (${(err as Error).message})` };
    }
    if (this.#registry.has(name)) return { success: false, error_message: `Failed to load LoRA adapter ${name} because it is already loaded` };
    if (this.#o.maxRank !== undefined && files.rank > this.#o.maxRank) {
      return {
        success: false,
        error_message: `LoRA adapter ${name} with rank ${files.rank} is incompatible with the current LoRA memory pool configuration. Please ensure that the LoRA adapter's rank is within the configured \`--max-lora-rank\` and that the target modules are included in \`--lora-target-modules\`.`,
      };
    }
    const pinnedNow = [...this.#registry.values()].filter((r) => r.pinned).length;
    if (pinned && pinnedNow >= this.#o.perBatch - 1) {
      return {
        success: false,
        error_message: `Failed to load LoRA adapter ${name} as a pinned adapter. It is not allowed to pin all slots in the LoRA memory pool to avoid starvation for unpinned adapters and base models. Please increase your \`--max-loras-per-batch\` or load it as unpinned LoRA adapters.`,
      };
    }
    const ref: Ref = { id: `lora-${++this.#nextId}`, name, path, pinned, files, counter: 0 };
    this.#registry.set(name, ref);
    this.#refCache.set(name, { path, pinned });
    sglangLog('INFO', `LoRA adapter loading completes: LoRARef(lora_id=${ref.id}, lora_name=${name}, lora_path=${path}, pinned=${pinned})`);
    while (this.#o.maxLoaded !== undefined && this.#registry.size > this.#o.maxLoaded) {
      const lru = [...this.#registry.values()].find((r) => !r.pinned);
      if (!lru) {
        // Raised after the new adapter is registered: it stays loaded though the answer says it failed.
        return { success: false, error_message: `Didn't find any LoRA adapters when trying to evict LRU LoRA adapter. LoRA registry is: ${keys(this.#registry)}` };
      }
      sglangLog('INFO', `Unloading least recently used LoRA adapter '${lru.name}' (current number of adapters: ${this.#registry.size}, max allowed: ${this.#o.maxLoaded})`);
      const r = await this.#unloadLocked(lru.name);
      if (!r.success) return { success: false, error_message: `Error while unloading LRU LoRA adapter '${lru.name}': ${r.error_message}` };
    }
    return { success: true, error_message: null };
  }

  /** tokenizer_control_mixin.py:565-585; lora_registry.py:109-124, 186-203; lora_manager.py:327-359. */
  async #unloadLocked(name: string): Promise<{ success: boolean; error_message: string | null }> {
    const ref = this.#registry.get(name);
    if (!ref) return { success: false, error_message: `LoRA with name ${name} does not exist. Loaded LoRAs: ${keys(this.#registry)}` };
    this.#registry.delete(name);
    if (ref.counter !== 0) {
      // Below zero it never comes back: nothing can acquire an unregistered adapter (SGLang #36894).
      if (ref.counter < 0) this.#scheduler.stall();
      await new Promise<void>((resolve) => this.#zero.set(ref.id, resolve));
    }
    sglangLog('INFO', `LoRA adapter unloading completes: LoRARef(lora_id=${ref.id}, lora_name=${name})`);
    return { success: true, error_message: null };
  }

  /**
   * A request's adapter (serving_base.py:55-71; tokenizer_manager.py:3292-3339):
   * the part of `model` after its first colon, else `lora_path`; an adapter
   * unloaded or evicted is loaded again, one never loaded is a ValueError (400).
   */
  async pick(body: Record<string, unknown>): Promise<LoraPick> {
    const model = typeof body.model === 'string' ? body.model : '';
    const colon = model.indexOf(':');
    const fromModel = colon === -1 ? '' : model.slice(colon + 1).trim();
    const name = fromModel || (typeof body.lora_path === 'string' ? body.lora_path : '');
    if (!name) {
      // SGLang never compares `model` (serving_completions.py:58-64): a bare adapter name is the base's answer.
      return typeof body.model === 'string' && this.#registry.has(body.model) ? { kind: 'base', model: body.model } : { kind: 'base' };
    }
    if (!this.#o.enabled) {
      return { kind: 'refuse', status: 400, type: 'BadRequest', message: `LoRA adapter '${name}' was requested, but LoRA is not enabled. Please launch the server with --enable-lora flag and preload adapters using --lora-paths or /load_lora_adapter endpoint.` };
    }
    if (!this.#registry.has(name)) {
      const cached = this.#refCache.get(name);
      if (!cached) return { kind: 'refuse', status: 400, type: 'BadRequest', message: `Got LoRA adapter that has never been loaded: ${name}\nAll loaded adapters: dict_keys([${[...this.#refCache.keys()].map((k) => `'${k}'`).join(', ')}]).` };
      sglangLog('INFO', `Reloading evicted adapter: ${name}`);
      const r = await this.#locked(() => (this.#registry.has(name) ? Promise.resolve({ success: true, error_message: null }) : this.#loadLocked(name, cached.path, cached.pinned)));
      if (!r.success && !String(r.error_message).includes('already loaded')) {
        return { kind: 'refuse', status: 400, type: 'BadRequest', message: `Failed to implicitly load LoRA adapter ${name}: ${r.error_message}` };
      }
    }
    const ref = this.#registry.get(name) as Ref;
    // acquire: a lookup counts as use (lora_registry.py:132-150).
    this.#registry.delete(name);
    this.#registry.set(name, ref);
    ref.counter++;
    const extra = typeof body.n === 'number' && body.n > 1 ? 1 : 0;
    const release = once(() => {
      ref.counter -= 1 + extra;
      if (ref.counter === 0) this.#zero.get(ref.id)?.();
    });
    return { kind: 'adapter', model, name, slot: ref.id, digest: this.#buffer(ref), release };
  }

  /** What a request's adapter is answered from: its own weights, or under --sim-lora-name-keyed-pool whatever its name's resident buffer holds. */
  #buffer(ref: Ref): string {
    if (!this.#o.nameKeyedPool) return ref.files.answerDigest;
    const held = this.#namePool.get(ref.name) ?? ref.files.answerDigest;
    this.#namePool.delete(ref.name);
    this.#namePool.set(ref.name, held);
    while (this.#namePool.size > this.#o.perBatch) this.#namePool.delete(this.#namePool.keys().next().value as string);
    return held;
  }
}
