/**
 * The vLLM double's LoRA adapters, as vLLM 017e9f44 serves them (V:path:line
 * at that commit):
 *
 * - the frontend's registry of names (OpenAIServingModels.lora_requests),
 *   filled by /v1/load_lora_adapter and emptied of a name by
 *   /v1/unload_lora_adapter, both mounted only with
 *   VLLM_ALLOW_RUNTIME_LORA_UPDATING (V:vllm/entrypoints/serve/lora/api_router.py:26-75);
 * - the worker's LRU cache of adapters by lora_int_id, of --max-cpu-loras
 *   (default --max-loras: V:vllm/config/lora.py:116-124), which a load adds to
 *   and evicts the oldest from (V:vllm/lora/worker_manager.py:288-324), and
 *   which the unload never touches (vLLM #54839): a reload under the same
 *   name gets a new lora_int_id (V:vllm/entrypoints/openai/models/serving.py:179-183)
 *   and the cache holds both copies;
 * - at most --max-loras adapters in one batch (V:vllm/v1/core/sched/scheduler.py:790-803);
 * - vllm:lora_requests_info (V:vllm/v1/metrics/loggers.py:1061-1074, 1167-1179).
 *
 * Faults vLLM shows only sometimes are knobs: --sim-lora-wrong-adapter (vLLM
 * #47724: a request answered by another loaded adapter, no error, no log,
 * no metric) and --sim-lora-load-crash-busy (vLLM #13698, on 0.7.3: a load
 * while generations are in progress crashes the server; at 017e9f44 a load
 * is a utility call the engine core runs between steps,
 * V:vllm/v1/engine/core.py:1504-1530, 1570-1583, so by default it succeeds),
 * --sim-lora-not-applied (an adapter loaded, listed and answered by its
 * name, its weights not applied: the base answers; vLLM #9688, "even if I
 * give a wrong lora path, it doesn't report an error, but gives wrong
 * result") and --sim-lora-stale-id (vLLM #12199, "Dynamically load lora got
 * wrong output", its log a runtime adapter with lora_int_id=1: at
 * 4db72e57f6 --lora-modules took ids 1..N and the runtime counter started
 * again at 0, V:vllm/entrypoints/openai/serving_models.py:59-71, 138-142 at
 * that commit; the worker's add_adapter, finding the id cached, only
 * touches it, V:vllm/lora/worker_manager.py:288-324, so the new name is
 * served by the cached adapter's weights).
 *
 * --lora-modules NAME=PATH are loaded before the server answers, through
 * load_lora_adapter with the runtime counter (init_static_loras,
 * V:vllm/entrypoints/openai/models/serving.py:124-139).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { vllmLog } from './engine-log.js';
import type { FakeBatchScheduler, SchedRequest } from './fake-batch-scheduler.js';
import { AdapterFilesError, type AdapterFiles, type LoraPick, type LoraRoutes, once, readAdapterFiles, readAdapterFilesSync } from './fake-lora.js';
import { errorBody } from './openai-responses.js';
import { readBody, sendJson } from './sim-http.js';

export interface VllmLoraOptions {
  /** --enable-lora (V:vllm/engine/arg_utils.py:609). */
  enabled: boolean;
  /** --max-loras: adapters in one batch (V:vllm/config/lora.py:37-38), default 1. */
  maxLoras: number;
  /** --max-lora-rank, default 16 (V:vllm/config/lora.py:27, 35). */
  maxRank: number;
  /** --max-cpu-loras: the worker's cache; default --max-loras (lora.py:116-124). */
  maxCpuLoras: number;
  /** --sim-lora-wrong-adapter (vLLM #47724). */
  wrongAdapter: boolean;
  /** --sim-lora-load-crash-busy (vLLM #13698). */
  loadCrashBusy: boolean;
  /** --sim-lora-not-applied (vLLM #9688): adapters answer as the base does. */
  notApplied?: boolean;
  /** --sim-lora-stale-id (vLLM #12199): runtime loads count ids from 0 beside --lora-modules' 1..N. */
  staleId?: boolean;
  /** --lora-modules NAME=PATH (LoRAParserAction, V:vllm/entrypoints/openai/cli_args.py:32-75). */
  modules?: { name: string; path: string }[];
}

interface Registered {
  name: string;
  path: string;
  intId: number;
  digest: string;
  /** What its answers are made from (AdapterFiles.answerDigest). */
  answers: string;
}

export class FakeVllmLora implements LoraRoutes {
  readonly #o: VllmLoraOptions;
  readonly #runtime: boolean;
  readonly #scheduler: FakeBatchScheduler;
  readonly #fatal: (why: string) => void;
  /** The frontend's names, in load order. */
  readonly #registry = new Map<string, Registered>();
  /** The worker's cache, least recently used first: lora_int_id → the adapter it holds. */
  readonly #worker = new Map<number, Registered>();
  #nextId = 0;
  /** --sim-lora-stale-id: the runtime counter of 4db72e57f6, apart from --lora-modules' ids. */
  #runtimeId = 0;
  /** vllm:lora_requests_info's series: label text → the time it was last set. */
  readonly #series = new Map<string, number>();
  #lastSet = 0;
  /** lora_resolver_lock: one load or unload of a name at a time (V:vllm/entrypoints/openai/models/serving.py:118, 172-173, 226-227). */
  readonly #nameLocks = new Map<string, Promise<unknown>>();

  constructor(o: VllmLoraOptions, env: NodeJS.ProcessEnv, scheduler: FakeBatchScheduler, fatal: (why: string) => void) {
    this.#o = o;
    // V:vllm/envs.py:1180-1183: "1" or "true", any case, after strip.
    this.#runtime = ['1', 'true'].includes((env.VLLM_ALLOW_RUNTIME_LORA_UPDATING ?? '0').trim().toLowerCase());
    this.#scheduler = scheduler;
    this.#fatal = fatal;
    if (this.#runtime) vllmLog('WARNING', 'api_router.py:30', 'LoRA dynamic loading & unloading is enabled in the API server. This should ONLY be used for local development!');
  }

  /** --lora-modules, loaded before the server answers; a message when one cannot be (init_static_loras raises). */
  startModules(): string | undefined {
    for (const { name, path } of this.#o.modules ?? []) {
      let files: AdapterFiles;
      try {
        files = readAdapterFilesSync(path);
      } catch (err) {
        return `ValueError: Loading lora ${name} failed: ${(err as Error).message}`;
      }
      if (files.rank > this.#o.maxRank) return `ValueError: LoRA rank ${files.rank} is greater than max_lora_rank ${this.#o.maxRank}.`;
      const a: Registered = { name, path, intId: ++this.#nextId, digest: files.digest, answers: files.answerDigest };
      this.#cache(a);
      this.#registry.set(name, a);
      vllmLog('INFO', 'serving.py:216', `Loaded new LoRA adapter: name '${name}', path '${path}'`);
    }
    return undefined;
  }

  /** The scheduler's admission rule: no request whose adapter would make the batch's adapters more than --max-loras. */
  admits = (req: SchedRequest, running: readonly SchedRequest[]): boolean => {
    if (!req.lora) return true;
    const slots = new Set(running.flatMap((r) => (r.lora ? [r.lora.slot] : [])));
    return slots.has(req.lora.slot) || slots.size < this.#o.maxLoras;
  };

  /** The cards /v1/models adds after the base's (V:vllm/entrypoints/openai/models/serving.py:149-165). */
  cards(baseName: string, createdS: number): Record<string, unknown>[] {
    return [...this.#registry.values()].map((a) => ({ id: a.name, object: 'model', created: createdS, owned_by: 'vllm', root: a.path, parent: baseName, max_model_len: null, permission: [] }));
  }

  /** The routes; false when `path` is none of them. */
  handle(req: IncomingMessage, res: ServerResponse, path: string, method: string): boolean {
    if (method === 'GET' && path === '/sim/loras') {
      // Not vLLM's: what its worker holds, which vLLM shows nowhere (vLLM #54839), for tests.
      sendJson(res, 200, { registry: [...this.#registry.keys()], worker: [...this.#worker.values()].map((a) => ({ id: a.intId, name: a.name, digest: a.digest })) });
      return true;
    }
    if (!this.#runtime || method !== 'POST') return false;
    if (path === '/v1/load_lora_adapter') void this.#body(req, res).then((b) => b && this.#byName(b, () => this.#load(b, res)));
    else if (path === '/v1/unload_lora_adapter') void this.#body(req, res).then((b) => b && this.#byName(b, () => this.#unload(b, res)));
    else return false;
    return true;
  }

  /** Runs `fn` once the calls before it for the same lora_name are done. */
  #byName(body: Record<string, unknown>, fn: () => Promise<void>): Promise<void> {
    const name = typeof body.lora_name === 'string' ? body.lora_name : '';
    const run = (this.#nameLocks.get(name) ?? Promise.resolve()).then(fn);
    const tail = run.catch(() => {});
    this.#nameLocks.set(name, tail);
    void tail.then(() => this.#nameLocks.get(name) === tail && this.#nameLocks.delete(name));
    return run;
  }

  async #body(req: IncomingMessage, res: ServerResponse): Promise<Record<string, unknown> | undefined> {
    try {
      const body = JSON.parse(await readBody(req)) as unknown;
      if (body && typeof body === 'object' && !Array.isArray(body)) return body as Record<string, unknown>;
    } catch {
      // answered below
    }
    sendJson(res, 400, errorBody('Invalid JSON body', 'BadRequestError', 400));
    return undefined;
  }

  /** V:vllm/entrypoints/openai/models/serving.py:167-219, 237-259. */
  async #load(body: Record<string, unknown>, res: ServerResponse): Promise<void> {
    const name = typeof body.lora_name === 'string' ? body.lora_name : '';
    const path = typeof body.lora_path === 'string' ? body.lora_path : '';
    const inplace = body.load_inplace === true;
    if (!name || !path) return sendJson(res, 400, errorBody("Both 'lora_name' and 'lora_path' must be provided.", 'InvalidUserInput', 400));
    const existing = this.#registry.get(name);
    if (existing && !inplace) {
      return sendJson(res, 400, errorBody(`The lora adapter '${name}' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.`, 'InvalidUserInput', 400));
    }
    if (this.#o.loadCrashBusy && this.#scheduler.running(false) > 0) {
      // vLLM #13698: the load lands in the middle of generations and the engine dies.
      vllmLog('ERROR', 'core.py:1000', `RuntimeError while adding LoRA '${name}' during generation (--sim-lora-load-crash-busy, vLLM #13698)`);
      this.#fatal('a LoRA load during generation');
      return sendJson(res, 500, errorBody('EngineCore encountered an issue. See stack trace (above) for the root cause.', 'InternalServerError', 500));
    }
    // The engine core's add_lora, whose failure comes back as "Call to add_lora method failed: …" (V:vllm/v1/engine/core.py:1580-1582).
    const failed = (why: string) => {
      vllmLog('ERROR', 'core.py:1581', `Invocation of add_lora method failed: ${why}`);
      sendJson(res, 500, errorBody(`Call to add_lora method failed: ${why}`, 'InternalServerError', 500));
    };
    // V:vllm/v1/worker/lora_model_runner_mixin.py:87, 290-292.
    if (!this.#o.enabled) return failed('LoRA is not enabled. Use --enable-lora to enable LoRA.');
    let files: Awaited<ReturnType<typeof readAdapterFiles>>;
    try {
      files = await readAdapterFiles(path);
    } catch (err) {
      // A folder without the adapter's files is LoRAAdapterNotFoundError, a 404 (V:vllm/lora/worker_manager.py:161-169;
      // V:vllm/exceptions.py:63-84; models/serving.py:198-208); anything else unreadable, a 500.
      if (err instanceof AdapterFilesError && err.notFound) {
        return sendJson(res, 404, errorBody(`Loading lora ${name} failed: No adapter found for ${path}`, 'NotFoundError', 404));
      }
      return failed((err as Error).message);
    }
    // PEFTHelper.validate_legal (V:vllm/lora/peft_helper.py:118-132).
    if (files.rank > this.#o.maxRank) return failed(`LoRA rank ${files.rank} is greater than max_lora_rank ${this.#o.maxRank}.`);
    const intId = existing?.intId ?? (this.#o.staleId ? ++this.#runtimeId : ++this.#nextId);
    const a: Registered = { name, path, intId, digest: files.digest, answers: files.answerDigest };
    this.#cache(a, inplace);
    this.#registry.set(name, a);
    vllmLog('INFO', 'serving.py:216', `Loaded new LoRA adapter: name '${name}', path '${path}'`);
    res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' }).end(`Success: LoRA adapter '${name}' added successfully.`);
  }

  /** The worker's add_adapter: in the cache (touched), or loaded with the oldest evicted beyond --max-cpu-loras (V:vllm/lora/worker_manager.py:288-324). */
  #cache(a: Registered, inplace = false): void {
    const held = this.#worker.get(a.intId);
    if (held && !inplace) {
      // Touched, not loaded again: what the cache holds under the id stays (worker_manager.py:316-322).
      this.#worker.delete(a.intId);
      this.#worker.set(a.intId, held);
      return;
    }
    this.#worker.delete(a.intId);
    if (this.#worker.size + 1 > this.#o.maxCpuLoras) {
      const oldest = this.#worker.keys().next().value as number;
      this.#worker.delete(oldest);
    }
    this.#worker.set(a.intId, a);
  }

  /** V:vllm/entrypoints/openai/models/serving.py:221-235, 261-280: the name is forgotten, the worker's copy stays. */
  async #unload(body: Record<string, unknown>, res: ServerResponse): Promise<void> {
    const name = typeof body.lora_name === 'string' ? body.lora_name : '';
    if (!name) return sendJson(res, 400, errorBody("'lora_name' needs to be provided to unload a LoRA adapter.", 'InvalidUserInput', 400));
    if (!this.#registry.has(name)) return sendJson(res, 404, errorBody(`The lora adapter '${name}' cannot be found.`, 'NotFoundError', 404));
    this.#registry.delete(name);
    vllmLog('INFO', 'serving.py:234', `Removed LoRA adapter: name '${name}'`);
    res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' }).end(`Success: LoRA adapter '${name}' removed successfully.`);
  }

  /**
   * A request's adapter: its `model` among the registry's names
   * (V:vllm/entrypoints/serve/engine/serving.py:40-65, 178-197); anything
   * else goes on to the model check, whose 404 is vLLM's.
   */
  async pick(body: Record<string, unknown>): Promise<LoraPick> {
    const a = typeof body.model === 'string' ? this.#registry.get(body.model) : undefined;
    if (!a) return { kind: 'base' };
    // The worker loads it again if the cache dropped it (V:vllm/lora/worker_manager.py:273-287);
    // what it serves is what its cache holds under the id (another adapter's, under --sim-lora-stale-id).
    this.#cache(a);
    let served = this.#worker.get(a.intId) ?? a;
    if (this.#o.wrongAdapter) {
      // vLLM #47724: answered with another loaded adapter's weights, said nowhere.
      const other = [...this.#registry.values()].reverse().find((b) => b.name !== a.name);
      if (other) served = other;
    }
    // --sim-lora-not-applied (vLLM #9688): the base's answer under the adapter's name.
    const digest = this.#o.notApplied ? '' : served.answers;
    return { kind: 'adapter', model: a.name, name: a.name, slot: String(a.intId), digest, release: once(() => {}) };
  }

  /**
   * vllm:lora_requests_info, with --enable-lora and stats logged: one series
   * per label set ever set, never removed, its value the time it was set;
   * the label set now is set on each look, so the newest series is the state
   * (V:vllm/v1/metrics/loggers.py:1054-1074, 1167-1179; names in first-seen
   * order, V:vllm/v1/metrics/stats.py:540-563).
   */
  metricsText(logStats: boolean): string {
    if (!this.#o.enabled || !logStats) return '';
    const { running, waiting } = this.#scheduler.snapshot();
    const names = (rs: SchedRequest[]) => [...new Set(rs.flatMap((r) => (r.lora ? [r.lora.name] : [])))].join(',');
    const labels = `max_lora="${this.#o.maxLoras}",waiting_lora_adapters="${names(waiting)}",running_lora_adapters="${names(running)}"`;
    const now = Math.max(Date.now() / 1000, this.#lastSet + 0.001);
    this.#lastSet = now;
    this.#series.delete(labels);
    this.#series.set(labels, now);
    const lines = [...this.#series].map(([l, t]) => `vllm:lora_requests_info{${l}} ${t.toFixed(3)}`);
    return `# HELP vllm:lora_requests_info Running stats on lora requests.\n# TYPE vllm:lora_requests_info gauge\n${lines.join('\n')}\n`;
  }
}
