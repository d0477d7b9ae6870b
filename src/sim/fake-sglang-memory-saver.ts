/**
 * SGLang's memory saver in the double (ENGINES.md (e)), as SGLang v0.5.18
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
 *   holds requests with /pause_generation first (fake-sglang.ts).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { sglangLog } from './engine-log.js';
import { clearGpuUsage, writeGpuUsage } from './fake-gpu-usage.js';
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
  knobs: SimKnobs;
  /** The engine's GPUs, from CUDA_VISIBLE_DEVICES. */
  gpus: number[];
  /** Whether the scheduler holds nothing (Scheduler.is_fully_idle, managers/scheduler.py:4083). */
  isIdle: () => boolean;
  /** An exception in the scheduler: the tree dies (fake-sglang.ts killTree). */
  crash: (why: string) => void;
}

export class FakeSglangMemorySaver {
  /** offload_tags (weight_updater.py:85). */
  readonly #offloaded = new Set<string>();
  /** Tags whose memory is unmapped (only with --enable-memory-saver). */
  readonly #paused = new Set<string>();

  constructor(private readonly o: FakeMemorySaverOptions) {}

  /** Some region's memory is unmapped: a forward pass now faults. */
  get released(): boolean {
    return this.#paused.size > 0;
  }

  /** The memory the loaded engine holds, shown to the fake nvidia-smi. */
  loaded(): void {
    this.#show();
  }

  /** The process exits: it holds nothing. */
  gone(): void {
    if (this.o.knobs.gpuUsageDir) clearGpuUsage(this.o.knobs.gpuUsageDir);
  }

  #show(): void {
    const { gpuUsageDir, gpuMemoryMib } = this.o.knobs;
    if (!gpuUsageDir || gpuMemoryMib <= 0) return;
    let share = 1;
    for (const t of this.#paused) share -= TAG_SHARE[t] ?? 0;
    writeGpuUsage(gpuUsageDir, this.o.gpus, gpuMemoryMib * share);
  }

  /** Serves the two routes; false for any other. */
  handle(req: IncomingMessage, res: ServerResponse, path: string, method: string): boolean {
    if (method !== 'GET' && method !== 'POST') return false;
    if (path !== '/release_memory_occupation' && path !== '/resume_memory_occupation') return false;
    void this.#serve(req, res, path === '/release_memory_occupation');
    return true;
  }

  async #serve(req: IncomingMessage, res: ServerResponse, release: boolean): Promise<void> {
    const tags = await readTags(req);
    if (typeof tags === 'string') {
      sendJson(res, 400, errorBody(tags, 'Bad Request', 400));
      return;
    }
    const chosen = tags === null || tags.length === 0 ? [...GPU_MEMORY_ALL_TYPES] : tags;
    if (release) {
      // weight_updater.py:203-205.
      if (!this.o.isIdle()) return this.o.crash('Scheduler hit an exception: AssertionError: release_memory_occupation should be called only when server is idle.');
      for (const t of chosen) this.#offloaded.add(t);
      if (this.o.enabled) {
        for (const t of chosen.filter((t) => t in TAG_SHARE)) {
          if (this.#paused.has(t)) return this.o.crash(`[torch_memory_saver.cpp] Cannot pause allocation that is not active. tag=${t}`);
          this.#paused.add(t);
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
        // Mapping fresh memory and, for the weights, the static state back (weight_updater.py:257-269).
        await sleep(this.o.knobs.wakeTimeMs);
        for (const t of chosen) this.#paused.delete(t);
      }
      this.#show();
      sglangLog('INFO', `resume_memory_occupation: tags=${chosen.join(',')}`);
    }
    sendJson(res, 200, null);
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
