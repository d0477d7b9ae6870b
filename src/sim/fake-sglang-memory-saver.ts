/**
 * SGLang's memory saver in the double, as SGLang v0.5.18
 * (71de97b) does it. `GET|POST /release_memory_occupation` and
 * `/resume_memory_occupation` take a JSON body `{"tags": [...]}` (tags
 * optional, none or [] meaning weights, kv_cache and cuda_graph), answer 200
 * with `null` (the handler returns nothing) and are ADMIN_OPTIONAL: with
 * only --api-key they take that key (S:python/sglang/srt/entrypoints/http_server.py:1482-1503;
 * managers/io_struct.py:1944-1962; constants.py:2-9; utils/auth.py:128-138).
 * A body missing or not such an object is FastAPI's RequestValidationError,
 * which SGLang answers 400 (http_server.py:589-632).
 *
 * What the scheduler does (S:python/sglang/srt/managers/scheduler_components/weight_updater.py
 * at 71de97b), and what this double does for it:
 * - release asserts the server is fully idle (:202-205); a failed assertion is
 *   an exception in the scheduler, which SIGQUITs its parent and the tree
 *   dies (managers/scheduler.py:5066-5069): so does the double.
 * - release adds the tags to offload_tags and pauses each region (:207-244);
 *   resume removes them with set.remove (:248-255), so a resume of a tag not
 *   released raises KeyError in the scheduler: the engine dies, even without
 *   --enable-memory-saver.
 * - Without --enable-memory-saver the adapter is a no-op (utils/torch_memory_saver_adapter.py:27-29,
 *   87-108; server_args.py:3478-3482): both calls answer 200 and nothing is
 *   freed. With it, torch_memory_saver unmaps the regions and keeps their
 *   addresses; pausing a region already paused, or resuming one not paused,
 *   exit(1)s the scheduler (fzyzcjy/torch_memory_saver csrc/core.cpp,
 *   pause/resume, at 1a565eb): the engine dies.
 * - Nothing guards a generation while released: the scheduler takes it
 *   (a health check too, when idle: managers/scheduler.py:1877-1893) and runs
 *   it on unmapped memory. *(inferred)* That is a CUDA illegal-address error
 *   in the scheduler, and the engine dies; the double dies so. A caller
 *   holds requests with /pause_generation first (fake-sglang-pause.ts).
 * - The weights come back only with --enable-weights-cpu-backup (default
 *   False, S:python/sglang/srt/server_args.py:3483-3487): the weights region is
 *   allocated with enable_cpu_backup from that flag
 *   (model_executor/model_runner_components/load_model_utils.py:281-300), and
 *   torch_memory_saver's pause copies a region to pinned host memory only
 *   when it has a backup, its resume maps fresh device memory and copies
 *   back only from that backup (csrc/core.cpp pause/resume at 1a565eb). The
 *   release stashes the model's buffers alone (weight_updater.py:235-237,
 *   345-350). So a resume without the backup serves on uninitialised
 *   weights: /health_generate (any output), /v1/models and the GPU memory
 *   are all fine, every generated token is garbage (RouteContext.weightsLost),
 *   until POST /update_weights_from_disk loads them again. A maintainer, on
 *   sgl-project/sglang#6367: "the params paused are not protected. You have
 *   to rebuild the weights by `update_weights_from_disk`." The pinned backup
 *   is allocated at the first pause and kept after the resume ("currently
 *   keep it there to reduce re-alloc time", core.cpp resume): host RAM the
 *   size of the weights for the engine's life.
 */
import { awaitHold } from './sim-hold.js';
import { createHash, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { sglangLog } from './engine-log.js';
import { clearGpuUsage, readGpuUsage, writeGpuUsage } from './fake-gpu-usage.js';
import { errorBody } from './openai-responses.js';
import { sendJson } from './sim-http.js';
import type { SimKnobs } from './sim-knobs.js';

/** GPU_MEMORY_ALL_TYPES (S:python/sglang/srt/constants.py:2-9). */
export const GPU_MEMORY_ALL_TYPES = ['kv_cache', 'weights', 'cuda_graph'] as const;

/** Shares of the engine's GPU memory per tag; the rest (CUDA context, NCCL buffers) is never released. */
const TAG_SHARE: Record<string, number> = { weights: 0.45, kv_cache: 0.5, cuda_graph: 0.03 };

export interface FakeMemorySaverOptions {
  /** --enable-memory-saver (S:python/sglang/srt/server_args.py:3478-3482). */
  enabled: boolean;
  /** --enable-weights-cpu-backup (S:python/sglang/srt/server_args.py:3483-3487): a release keeps the weights in host RAM. */
  cpuBackup: boolean;
  /** The model the engine loaded (--model-path), what its weights are a checksum of. */
  model: string;
  /** Tensor-parallel ranks: /weights_checker answers one checksum per rank. */
  tp: number;
  knobs: SimKnobs;
  /** The engine's GPUs, from CUDA_VISIBLE_DEVICES. */
  gpus: number[];
  /** Whether the scheduler holds nothing (Scheduler.is_fully_idle, managers/scheduler.py:4083). */
  isIdle: () => boolean;
  /** An exception in the scheduler: the tree dies (fake-sglang.ts killTree). */
  crash: (why: string) => void;
  /**
   * The tokenizer's model_update_lock for a weight update: taken (new
   * requests wait, running ones finish) unless generation is paused, when
   * the update goes ahead at once (S:python/sglang/srt/managers/tokenizer_manager.py:2031-2057).
   * Resolves with its release.
   */
  updateLock: () => Promise<() => void>;
  /** A weight update from disk succeeded: the tokenizer now serves under `modelPath` (tokenizer_manager.py:2099-2103, 2114-2117). */
  reloaded: (modelPath: string) => void;
  /** The scheduler's flush_cache: the prefix cache is emptied (a release of the KV cache, weight_updater.py:230-231). */
  flushCache: () => void;
}

/** The tokenizer manager's answer to /update_weights_from_disk (S:python/sglang/srt/entrypoints/http_server.py:1235-1260). */
interface UpdateWeightsAnswer {
  success: boolean;
  message: string;
  num_paused_requests: number;
}

export class FakeSglangMemorySaver {
  /** offload_tags (weight_updater.py:85). */
  readonly #offloaded = new Set<string>();
  /** Tags whose memory is unmapped (only with --enable-memory-saver). */
  readonly #paused = new Set<string>();
  /**
   * What the weights region holds: '' while it holds the loaded model;
   * otherwise the nonce of the fresh memory a resume without a CPU backup
   * mapped (uninitialised, so different at every resume).
   */
  #garbage = '';
  /** Whether the pinned host copy of the weights exists (made at the first release with a backup, core.cpp pause). */
  #backedUp = false;

  constructor(private readonly o: FakeMemorySaverOptions) {}

  /** Some region's memory is unmapped: a forward pass now faults. */
  get released(): boolean {
    return this.#paused.size > 0;
  }

  /** The weights on the GPU are not the model's: every token generated is garbage (RouteContext.weightsLost). */
  get weightsLost(): boolean {
    return this.#garbage !== '';
  }

  /** The memory the loaded engine holds, shown to the fake nvidia-smi. */
  loaded(): void {
    this.#show();
  }

  /** The process exits: it holds nothing. */
  gone(): void {
    if (this.o.knobs.gpuUsageDir) clearGpuUsage(this.o.knobs.gpuUsageDir);
  }

  /**
   * A GPU of the engine where the other processes the fake nvidia-smi sees
   * (every other double's file in --sim-gpu-usage-dir) leave less than the
   * engine held awake, of --sim-gpu-total; undefined when each has room.
   */
  #takenByOthers(): string | undefined {
    const { gpuUsageDir, gpuMemoryMib, gpuTotalMib } = this.o.knobs;
    if (!gpuUsageDir || gpuMemoryMib <= 0) return undefined;
    const all = readGpuUsage(gpuUsageDir);
    const mine = readGpuUsage(gpuUsageDir, `${process.pid}.csv`);
    for (const g of this.o.gpus) {
      const others = (all.get(g) ?? 0) - (mine.get(g) ?? 0);
      if (others + gpuMemoryMib > gpuTotalMib) return `GPU ${g}: ${others} MiB held by other processes of ${gpuTotalMib} MiB`;
    }
    return undefined;
  }

  #show(): void {
    const { gpuUsageDir, gpuMemoryMib } = this.o.knobs;
    if (!gpuUsageDir || gpuMemoryMib <= 0) return;
    let share = 1;
    for (const t of this.#paused) share -= TAG_SHARE[t] ?? 0;
    writeGpuUsage(gpuUsageDir, this.o.gpus, gpuMemoryMib * share);
  }

  /** Serves the memory and weight routes; false for any other. */
  handle(req: IncomingMessage, res: ServerResponse, path: string, method: string): boolean {
    // S:python/sglang/srt/entrypoints/http_server.py:1235 (POST only).
    if (method === 'POST' && path === '/update_weights_from_disk') {
      void this.#updateFromDisk(req, res);
      return true;
    }
    if (method !== 'GET' && method !== 'POST') return false;
    if (path === '/weights_checker') {
      void this.#checkWeights(req, res);
      return true;
    }
    if (path !== '/release_memory_occupation' && path !== '/resume_memory_occupation') return false;
    void this.#serve(req, res, path === '/release_memory_occupation');
    return true;
  }

  /**
   * POST /update_weights_from_disk `{"model_path": …}` (model_path required,
   * io_struct.py:1743-1765): the weights are read again from the model's
   * files into the same tensors (model_executor/model_runner_components/weight_updater.py:141-220),
   * 200 `{"success": true, "message": "Succeeded to update model weights.",
   * "num_paused_requests": 0}` (http_server.py:1235-1260; scheduler_components/weight_updater.py:110-123),
   * and the tokenizer then serves under model_path: /v1/models and
   * /model_info name it, not --served-model-name (tokenizer_manager.py:2099-2103, 2114-2117).
   * While paused it runs at once; otherwise it waits for the requests in
   * flight (tokenizer_manager.py:2031-2057). Loading into weights still
   * released writes unmapped memory *(inferred)*: the scheduler dies, as on
   * any forward pass there.
   */
  async #updateFromDisk(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await readBodyObject(req);
    if (typeof body === 'string') return sendJson(res, 400, errorBody(body, 'Bad Request', 400));
    if (typeof body.model_path !== 'string') {
      return sendJson(res, 400, errorBody("1 validation error: {'type': 'missing', 'loc': ('body', 'model_path'), 'msg': 'Field required'}", 'Bad Request', 400));
    }
    const modelPath = body.model_path;
    sglangLog('INFO', `Start update_weights. Load format=auto`);
    const unlock = await this.o.updateLock();
    try {
      if (this.o.enabled && this.#paused.has('weights')) {
        return this.o.crash('Scheduler hit an exception: RuntimeError: CUDA error: an illegal memory access was encountered (update_weights_from_disk into weights released by release_memory_occupation)');
      }
      // The same files a start reads: as long as the load took.
      await sleep(this.o.knobs.loadTimeMs);
      this.#garbage = '';
      sglangLog('INFO', 'Update weights end.');
      this.o.reloaded(modelPath);
      const answer: UpdateWeightsAnswer = { success: true, message: 'Succeeded to update model weights.', num_paused_requests: 0 };
      sendJson(res, 200, answer);
    } finally {
      unlock();
    }
  }

  /**
   * GET|POST /weights_checker `{"action": "checksum"}` (the default,
   * io_struct.py:1964-1966): a checksum of the weights per TP rank and one
   * over them all (http_server.py:1506-1522; managers/tokenizer_control_mixin.py:810-829;
   * scheduler_components/weight_updater.py:289-323). The double's checksum is
   * of what the region holds: the model, or the fresh memory of a resume
   * without backup. Only "checksum" is modelled; the other actions
   * (snapshot, compare, reset_tensors: utils/weight_checker.py:73-86) answer
   * 400 here. Reading weights still released *(inferred)* faults.
   */
  async #checkWeights(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let text = '';
    for await (const chunk of req) text += chunk;
    let action = 'checksum';
    if (text.trim() !== '') {
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch {
        return sendJson(res, 400, errorBody("1 validation error: {'type': 'json_invalid', 'loc': ('body', 0), 'msg': 'JSON decode error'}", 'Bad Request', 400));
      }
      const a = (body as Record<string, unknown> | null)?.action;
      if (typeof a === 'string') action = a;
    }
    if (action !== 'checksum') return sendJson(res, 400, { success: false, message: `the double models only action="checksum", not ${JSON.stringify(action)}` });
    if (this.o.enabled && this.#paused.has('weights')) {
      return this.o.crash('Scheduler hit an exception: RuntimeError: CUDA error: an illegal memory access was encountered (weights_checker on weights released by release_memory_occupation)');
    }
    const sha = (t: string) => createHash('sha256').update(t).digest('hex');
    const ranks = Array.from({ length: this.o.tp }, (_, r) => {
      const weights = sha(`${this.o.model}|rank ${r}|${this.#garbage}`);
      return {
        checksums: { 'model.weights': weights },
        per_gpu_checksum: sha(`model.weights${weights}`),
        parallelism_info: { tp_rank: r, tp_size: this.o.tp, dp_rank: 0, dp_size: 1, pp_rank: 0, pp_size: 1, rank: r, size: this.o.tp },
      };
    });
    sendJson(res, 200, { success: true, message: 'Success.', ranks, per_engine_checksum: sha(ranks.map((x) => x.per_gpu_checksum).join('')) });
  }

  async #serve(req: IncomingMessage, res: ServerResponse, release: boolean): Promise<void> {
    const tags = await readTags(req);
    if (typeof tags === 'string') {
      sendJson(res, 400, errorBody(tags, 'Bad Request', 400));
      return;
    }
    const chosen = tags === null || tags.length === 0 ? [...GPU_MEMORY_ALL_TYPES] : tags;
    // A test's hold (sim-hold.ts): the scheduler does the step once the tokenizer has sent it, its HTTP client gone or not
    // (scheduler_components/weight_updater.py:202-213 takes no notice of it).
    await awaitHold(this.o.knobs.holdFile, release ? 'release_memory_occupation' : 'resume_memory_occupation');
    if (release) {
      // weight_updater.py:203-205.
      if (!this.o.isIdle()) return this.o.crash('Scheduler hit an exception: AssertionError: release_memory_occupation should be called only when server is idle.');
      for (const t of chosen) this.#offloaded.add(t);
      if (chosen.includes('kv_cache')) this.o.flushCache();
      if (this.o.enabled) {
        for (const t of chosen.filter((t) => t in TAG_SHARE)) {
          if (this.#paused.has(t)) return this.o.crash(`[torch_memory_saver.cpp] Cannot pause allocation that is not active. tag=${t}`);
          this.#paused.add(t);
        }
        if (chosen.includes('weights') && this.o.cpuBackup && !this.#backedUp) {
          const mib = Math.round(this.o.knobs.gpuMemoryMib * (TAG_SHARE.weights ?? 0));
          // pause's cudaMallocHost(&metadata.cpu_backup, size) whatever the caller's "level", under
          // CUDA_ERROR_CHECK: a host without room is exit(1) in the scheduler (csrc/core.cpp pause,
          // csrc/utils.h at 1a565eb). --sim-mem-available stands for the host's MemAvailable.
          const pinned = mib * Math.max(1, this.o.gpus.length);
          const room = this.o.knobs.memAvailableMib ?? hostMemAvailableMib();
          if (room !== undefined && pinned > room) return this.o.crash(`[torch_memory_saver.cpp] cudaError error: 2 (out of memory) (cudaMallocHost of ${pinned} MiB of cpu backup, ${room} MiB available)`);
          this.#backedUp = true;
          sglangLog('INFO', `[torch_memory_saver] weights copied to pinned host memory (cpu backup, ~${mib} MiB per GPU, kept until exit)`);
        }
      }
      this.#show();
      sglangLog('INFO', `release_memory_occupation: tags=${chosen.join(',')}${this.o.enabled ? '' : ' (memory saver disabled: nothing freed)'}`);
    } else {
      // weight_updater.py:253-255: set.remove.
      for (const t of chosen) {
        if (!this.#offloaded.has(t)) return this.o.crash(`Scheduler hit an exception: KeyError: '${t}'`);
        this.#offloaded.delete(t);
      }
      if (this.o.enabled) {
        for (const t of chosen.filter((t) => t in TAG_SHARE)) {
          if (!this.#paused.has(t)) return this.o.crash(`[torch_memory_saver.cpp] Cannot resume allocation that is not paused. tag=${t}`);
        }
        // resume's CURESULT_CHECK(cu_mem_create(…)) per allocation: memory another process took meanwhile is
        // exit(1) in the scheduler (csrc/core.cpp resume, csrc/utils.h at 1a565eb).
        const taken = this.#takenByOthers();
        if (taken) return this.o.crash(`[torch_memory_saver.cpp] CUresult error: 2 (out of memory) (cu_mem_create on ${taken})`);
        // Mapping fresh memory and, for the weights, the static state back (weight_updater.py:257-269).
        await sleep(this.o.knobs.wakeTimeMs);
        for (const t of chosen) this.#paused.delete(t);
        // Fresh memory holds the old weights only when copied back from the backup (core.cpp resume).
        if (chosen.includes('weights') && !this.o.cpuBackup) {
          this.#garbage = randomUUID();
          sglangLog('WARNING', '[fake-sglang] weights resumed without --enable-weights-cpu-backup: the region holds uninitialised memory until /update_weights_from_disk');
        }
      }
      this.#show();
      sglangLog('INFO', `resume_memory_occupation: tags=${chosen.join(',')}`);
    }
    sendJson(res, 200, null);
  }
}

/** This host's MemAvailable in MiB, what the pinned copy must fit without --sim-mem-available; undefined when unreadable. */
function hostMemAvailableMib(): number | undefined {
  try {
    const m = /^MemAvailable:\s+(\d+)\s+kB$/m.exec(readFileSync('/proc/meminfo', 'utf8'));
    return m ? Math.floor(Number(m[1]) / 1024) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * A control endpoint's body, `Annotated[Req, Body()]`: required, a JSON
 * object; otherwise the message of FastAPI's validation error (the wording
 * is the double's, the 400 SGLang's).
 */
export async function readBodyObject(req: IncomingMessage): Promise<Record<string, unknown> | string> {
  let text = '';
  for await (const chunk of req) text += chunk;
  if (text.trim() === '') return "1 validation error: {'type': 'missing', 'loc': ('body',), 'msg': 'Field required', 'input': None}";
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return "1 validation error: {'type': 'json_invalid', 'loc': ('body', 0), 'msg': 'JSON decode error'}";
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return "1 validation error: {'type': 'model_type', 'loc': ('body',), 'msg': 'Input should be an object'}";
  return body as Record<string, unknown>;
}

/** The body's tags: null when none were given, a message when FastAPI would refuse the body. */
async function readTags(req: IncomingMessage): Promise<string[] | null | string> {
  const body = await readBodyObject(req);
  if (typeof body === 'string') return body;
  const tags = body.tags;
  if (tags === undefined || tags === null) return null;
  if (!Array.isArray(tags) || tags.some((t) => typeof t !== 'string')) return "1 validation error: {'type': 'list_type', 'loc': ('body', 'tags'), 'msg': 'Input should be a valid list of strings'}";
  return tags as string[];
}
