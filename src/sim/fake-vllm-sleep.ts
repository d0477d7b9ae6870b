/**
 * vLLM's sleep mode in the double, as unkind as vLLM at
 * 2f41c894 (review engine-fidelity-2 §2.1, §3 N1, N10). The routes exist
 * only with VLLM_SERVER_DEV_MODE=1 (V:vllm/entrypoints/launchers/api_server/routers.py:34-37)
 * and are those of V:vllm/entrypoints/serve/dev/sleep/api_router.py:21-48:
 * `POST /sleep?level=1&mode=abort` (level defaults to "1", mode to "abort";
 * 200, empty), `POST /wake_up[?tags=weights&tags=kv_cache]` (200, empty) and
 * `GET /is_sleeping` (`{"is_sleeping": bool}`); with them
 * `POST /collective_rpc {"method": …}` (V:vllm/entrypoints/serve/dev/rpc/api_router.py:23-54).
 *
 * What happens to requests follows EngineCore.sleep/pause_scheduler
 * (V:vllm/v1/engine/core.py:867-903): mode=abort finishes every in-flight
 * request aborted; in every mode new requests are accepted and queued, not
 * run, until the scheduler resumes, which is only once the executor holds
 * every tag again (core.py:905-921). mode=wait lets the in-flight ones
 * finish first.
 *
 * What happens to the weights: level 1 backs them up in host RAM and a wake
 * copies them back; level 2 discards them (CuMemBackend.suspend offloads no
 * tag, V:vllm/device_allocator/sleep_mode_backend.py:120-125; the worker
 * keeps only the model's buffers, V:vllm/v1/worker/gpu_worker.py:207-217,
 * 241-256). A wake then maps fresh memory: /health, /v1/models and the GPU
 * memory are all back, and every token is garbage until
 * `collective_rpc reload_weights` loads them again (the documented level-2
 * wake is wake_up?tags=weights → reload_weights → wake_up?tags=kv_cache,
 * V:docs/features/sleep_mode.md:21, 98-108; vLLM #29341, PR #54235).
 *
 * Without --enable-sleep-mode there is no cumem pool (the memory pool is a
 * nullcontext, gpu_worker.py:267-272): /sleep still pauses the scheduler and
 * aborts, the executor "sleeps" an allocator that holds nothing, and the
 * answer is 200 (core.py:867-903; V:vllm/v1/executor/abstract.py:329-340).
 * Nothing is freed and the weights stay where they were.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { vllmLog } from './engine-log.js';
import type { FakeBatchScheduler } from './fake-batch-scheduler.js';
import { clearGpuUsage, writeGpuUsage } from './fake-gpu-usage.js';
import { DP_DUMMY_BATCH_MS, type FakeSpecDecode, ILLEGAL_ACCESS, reloadMs, reloadRefusal, resumesOnPartialWake } from './fake-vllm-sleep-faults.js';
import { errorBody } from './openai-responses.js';
import { awaitHold } from './sim-hold.js';
import { readBody, sendJson } from './sim-http.js';
import type { SimKnobs } from './sim-knobs.js';

/** What stays on a GPU of a sleeping engine: its CUDA context and what cumem does not manage. */
const RESIDUE_SHARE = 0.02;
/**
 * The share of the engine's memory its weights hold (the rest but the
 * residue is KV cache): a mid-size model under the default
 * gpu_memory_utilization. A partial wake shows in nvidia-smi as this much.
 */
const WEIGHTS_SHARE = 0.3;

/** The executor's sleeping tags (V:vllm/v1/executor/abstract.py:336). */
type Tag = 'weights' | 'kv_cache';
const TAGS: readonly Tag[] = ['weights', 'kv_cache'];

export interface FakeSleepOptions {
  /** --enable-sleep-mode (V:vllm/engine/arg_utils.py:919-921): the cumem allocator holds weights and KV cache. */
  enabled: boolean;
  /** VLLM_SERVER_DEV_MODE (V:vllm/envs.py:1418): bool(int(value)). */
  devMode: boolean;
  knobs: SimKnobs;
  /** The engine's GPUs, from CUDA_VISIBLE_DEVICES. */
  gpus: number[];
  /** The engine hit an error it cannot survive (a CUDA error): it fails as a dead engine does. */
  fatal: (why: string) => void;
  /** The vLLM version it plays (--sim-version): before 0.24.0 a partial wake resumes the scheduler (fake-vllm-sleep-faults.ts). */
  version: string;
  /** --data-parallel-size: before 0.24.0 an idle DP rank runs a dummy batch while asleep. */
  dp: number;
  /** --load-format: whether reload_weights can reload. */
  loadFormat: string;
  /** The draft of --speculative-config, lost by a level-2 sleep. */
  spec: FakeSpecDecode;
}

export class FakeVllmSleep {
  /** Tags the executor holds asleep; empty when awake (abstract.py:336, 361-367). */
  readonly #asleep = new Set<Tag>();
  /** The scheduler is paused (core.py:880-882), by any sleep, level 0 included. */
  #paused = false;
  /** The level the last sleep was asked at, for vllm:engine_sleep_state. */
  #gaugeLevel = 0;
  /** Whether the gauge says asleep: set by /sleep, cleared by any /wake_up (V:vllm/v1/engine/async_llm.py:971-983). */
  #gaugeAsleep = false;
  /** The GPU holds the model's weights (not fresh memory). False after a level-2 sleep until reload_weights. */
  #weightsValid = true;
  /** Utility calls reach the EngineCore one at a time, in order. */
  #chain: Promise<void> = Promise.resolve();
  /** A vLLM before #44483 asleep under DP (its dummy batch), or partly woken (its scheduler's next step): the timer that runs the forward. */
  #dummyBatch: NodeJS.Timeout | undefined;

  constructor(
    private readonly o: FakeSleepOptions,
    private readonly scheduler: FakeBatchScheduler,
  ) {}

  /** What GET /is_sleeping answers: the scheduler paused or any tag asleep (core.py:923-925). */
  get sleeping(): boolean {
    return this.#paused || this.#asleep.size > 0;
  }

  /** The engine generates from memory that no longer holds its weights (RouteContext.weightsLost). */
  get weightsLost(): boolean {
    return !this.#weightsValid;
  }

  /** The memory the loaded engine holds, shown to the fake nvidia-smi. */
  loaded(): void {
    this.#show();
  }

  /** The process exits: it holds nothing. */
  gone(): void {
    clearInterval(this.#dummyBatch);
    if (this.o.knobs.gpuUsageDir) clearGpuUsage(this.o.knobs.gpuUsageDir);
  }

  /** A forward ran on unmapped cumem pages: the CUDA error is sticky and the engine dies (vLLM #44395). */
  #illegalAccess(where: string): void {
    clearInterval(this.#dummyBatch);
    vllmLog('ERROR', 'core.py:1000', `${ILLEGAL_ACCESS} (${where})`);
    this.o.fatal(ILLEGAL_ACCESS);
  }

  /** What is resident: the residue always, the weights and the KV cache when awake. Without sleep mode nothing was ever released. */
  #show(): void {
    const { gpuUsageDir, gpuMemoryMib: m } = this.o.knobs;
    if (!gpuUsageDir || m <= 0) return;
    const awake = (t: Tag) => !this.o.enabled || !this.#asleep.has(t);
    const mib = m * RESIDUE_SHARE + (awake('weights') ? m * WEIGHTS_SHARE : 0) + (awake('kv_cache') ? m * (1 - RESIDUE_SHARE - WEIGHTS_SHARE) : 0);
    writeGpuUsage(gpuUsageDir, this.o.gpus, mib);
  }

  /** vllm:engine_sleep_state (V:vllm/v1/metrics/loggers.py:535-559, 1261-1278), one series per state. */
  metricsText(label: string): string {
    const awake = this.#gaugeAsleep ? 0 : 1;
    const offloaded = this.#gaugeAsleep && this.#gaugeLevel === 1 ? 1 : 0;
    const discarded = this.#gaugeAsleep && this.#gaugeLevel === 2 ? 1 : 0;
    const help =
      '# HELP vllm:engine_sleep_state Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.\n# TYPE vllm:engine_sleep_state gauge\n';
    const line = (state: string, v: number) => `vllm:engine_sleep_state{${label},sleep_state="${state}"} ${v.toFixed(1)}\n`;
    // The draft's counters ride here: what a level-2 sleep does to them is this class's to say.
    return help + line('awake', awake) + line('weights_offloaded', offloaded) + line('discard_all', discarded) + this.o.spec.metricsText(label);
  }

  /** Serves the route when it is one of dev mode's; false otherwise (then it is a 404, as without dev mode). */
  handle(req: IncomingMessage, res: ServerResponse, path: string, method: string): boolean {
    if (!this.o.devMode) return false;
    const query = new URL(req.url ?? '/', 'http://x').searchParams;
    if (method === 'GET' && path === '/is_sleeping') {
      // A utility call like sleep and wake_up: the EngineCore answers it between them, in order
      // (core.py:923-925, 1417-1446, 1534-1547), so it comes late behind a wake still running.
      this.#serially('is_sleeping', async () => sendJson(res, 200, { is_sleeping: this.sleeping }));
      return true;
    }
    if (method === 'POST' && path === '/sleep') {
      this.#serially('sleep', () => this.#sleep(res, query.get('level') ?? '1', query.get('mode') ?? 'abort'));
      return true;
    }
    if (method === 'POST' && path === '/wake_up') {
      // getlist("tags"); [] means every tag (api_router.py:34-37).
      const tags = query.getAll('tags');
      this.#serially('wake_up', () => this.#wake(res, tags.length === 0 ? undefined : tags));
      return true;
    }
    if (method === 'POST' && path === '/collective_rpc') {
      void this.#collectiveRpc(req, res);
      return true;
    }
    return false;
  }

  /** Runs `step` after every utility call before it; a test's --sim-hold-file may hold it first (sim-hold.ts), whoever asked it gone meanwhile. */
  #serially(name: string, step: () => Promise<void>): void {
    const run = async () => {
      await awaitHold(this.o.knobs.holdFile, name);
      await step();
    };
    this.#chain = this.#chain.then(run, run);
  }

  async #sleep(res: ServerResponse, levelText: string, mode: string): Promise<void> {
    const level = Number(levelText);
    // int(level) raising, or a mode pause_scheduler refuses: FastAPI's 500.
    if (!/^-?\d+$/.test(levelText) || !['abort', 'wait', 'keep'].includes(mode)) {
      sendJson(res, 500, errorBody(`invalid sleep level or mode: level=${levelText} mode=${mode}`, 'InternalServerError', 500));
      return;
    }
    this.scheduler.pause();
    this.#paused = true;
    if (mode === 'abort') this.scheduler.abortAll('Request aborted: the engine was put to sleep.');
    if (mode === 'wait') while (this.scheduler.running(false) > 0) await sleep(20);
    if (level >= 1) {
      if (this.#asleep.size > 0) vllmLog('WARNING', 'abstract.py:331', 'Executor is already sleeping.');
      else {
        for (const t of TAGS) this.#asleep.add(t);
        // Level 1 offloads the weights tag to host RAM; level 2 offloads nothing (sleep_mode_backend.py:125).
        // Without the cumem pool the allocator holds nothing and the weights are untouched (gpu_worker.py:267-272).
        if (level >= 2 && this.o.enabled) this.#weightsValid = false;
        if (level >= 2 && this.o.enabled) this.o.spec.discarded();
        this.#show();
        // Before #44483 DPEngineCoreProc's busy loop ran execute_dummy_batch() while asleep: a forward on released memory.
        if (this.o.enabled && this.o.dp > 1 && resumesOnPartialWake(this.o.version)) {
          this.#dummyBatch = setInterval(() => this.#illegalAccess('DP dummy batch while asleep'), DP_DUMMY_BATCH_MS);
        }
        const freed = this.o.enabled ? (this.o.knobs.gpuMemoryMib * (1 - RESIDUE_SHARE)) / 1024 : 0;
        vllmLog('INFO', 'gpu_worker.py:232', `Sleep mode freed ${freed.toFixed(2)} GiB memory (level ${level}, mode=${mode})`);
      }
    }
    this.#gaugeAsleep = true;
    this.#gaugeLevel = level;
    res.writeHead(200, { 'content-length': '0' }).end();
  }

  async #wake(res: ServerResponse, given: string[] | undefined): Promise<void> {
    vllmLog('INFO', 'api_router.py:38', `wake up the engine with tags: ${given ? `[${given.map((t) => `'${t}'`).join(', ')}]` : 'None'}`);
    // "scheduling" is the scheduler's own tag; with nothing else the executor is not asked (core.py:911-916).
    const tags = given?.filter((t) => t !== 'scheduling');
    if (tags === undefined || tags.length > 0) await this.#wakeExecutor(tags);
    // A partial wake keeps the scheduler paused until every tag is resident (core.py:918-921); before
    // #44483 every wake resumed it, and a request queued meanwhile ran on the KV cache still unmapped.
    const resumed = this.#asleep.size === 0 || resumesOnPartialWake(this.o.version);
    if (this.#asleep.size === 0) clearInterval(this.#dummyBatch);
    if (resumed && this.#paused) {
      this.#paused = false;
      this.scheduler.resume(this.o.knobs.wakeQueueDelayMs);
      // The busy loop schedules whatever is queued, or arrives, onto the tags still asleep.
      if (this.#asleep.size > 0) {
        const check = () => {
          const queued = this.scheduler.waiting(false) + this.scheduler.running(false);
          if (this.#asleep.size > 0 && queued > 0) this.#illegalAccess(`${queued} request(s) scheduled after a partial wake, tags ${[...this.#asleep].join(', ')} still asleep`);
        };
        clearInterval(this.#dummyBatch);
        this.#dummyBatch = setInterval(check, 20);
        setImmediate(check);
      }
    }
    this.#gaugeAsleep = false; // async_llm.py:979-983: recorded awake after any wake_up, partial or not
    res.writeHead(200, { 'content-length': '0' }).end();
  }

  /** Executor.wake_up (V:vllm/v1/executor/abstract.py:342-367): warnings, never errors. */
  async #wakeExecutor(tags: string[] | undefined): Promise<void> {
    if (this.#asleep.size === 0) {
      vllmLog('WARNING', 'abstract.py:344', 'Executor is not sleeping.');
      return;
    }
    const unknown = tags?.find((t) => !this.#asleep.has(t as Tag));
    if (unknown !== undefined) {
      vllmLog('WARNING', 'abstract.py:349', `Tag ${unknown} is not in sleeping tags {${[...this.#asleep].map((t) => `'${t}'`).join(', ')}}`);
      return;
    }
    await sleep(this.o.knobs.wakeTimeMs);
    const woken = (tags as Tag[] | undefined) ?? [...this.#asleep];
    for (const t of woken) this.#asleep.delete(t);
    // An injected fault (SimKnobs.wakeLosesWeights): the weights come back as fresh memory, never valid again.
    if (this.o.knobs.wakeLosesWeights && woken.includes('weights')) this.#weightsValid = false;
    // Fresh memory mapped for the weights: at level 1 the host copy is copied back, at level 2 there is none (cumem wake_up).
    this.#show();
    vllmLog('INFO', 'abstract.py:356', `It took ${(this.o.knobs.wakeTimeMs / 1000).toFixed(6)} seconds to wake up tags ${tags ? `[${tags.join(', ')}]` : 'all'}`);
  }

  /**
   * POST /collective_rpc: any worker method by name (rpc/api_router.py:23-54);
   * the double knows reload_weights, which loads the weights from the model
   * source in place (V:vllm/v1/worker/gpu_worker.py:470-472;
   * V:vllm/v1/worker/gpu_model_runner.py:5638-5707).
   */
  async #collectiveRpc(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let body: Record<string, unknown>;
    try {
      const parsed = JSON.parse(await readBody(req)) as unknown;
      if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('not an object');
      body = parsed as Record<string, unknown>;
    } catch (err) {
      sendJson(res, 400, { detail: `JSON decode error: ${(err as Error).message}` });
      return;
    }
    if (body.method === undefined || body.method === null) {
      sendJson(res, 400, { detail: "Missing 'method' in request body" });
      return;
    }
    if (body.method !== 'reload_weights') {
      // Executor.collective_rpc getattr()s the name on the worker: an AttributeError, FastAPI's 500.
      sendJson(res, 500, errorBody(`AttributeError: the double's worker has no method ${JSON.stringify(body.method)} (it models reload_weights only)`, 'InternalServerError', 500));
      return;
    }
    this.#serially('collective_rpc', async () => {
      // The loader is asked for get_all_weights before anything is loaded: FastAPI's 500, the engine unharmed (gpu_model_runner.py:5671-5676).
      const refusal = reloadRefusal(this.o.loadFormat);
      if (refusal) {
        vllmLog('ERROR', 'gpu_model_runner.py:5674', refusal);
        sendJson(res, 500, errorBody(refusal, 'InternalServerError', 500));
        return;
      }
      if (this.o.enabled && this.#asleep.has('weights')) {
        // Nothing guards reload_weights against a sleeping executor: the
        // loader writes into parameters whose cumem pages were unmapped
        // (V:vllm/device_allocator/cumem.py:259-276), an illegal address,
        // and a CUDA error of that kind is sticky: the engine is dead
        // *(inferred: no source line handles it)*. Wake the weights first.
        vllmLog('ERROR', 'gpu_model_runner.py:5693', 'RuntimeError: CUDA error: an illegal memory access was encountered (reload_weights while the weights sleep)');
        sendJson(res, 500, errorBody('RuntimeError: CUDA error: an illegal memory access was encountered', 'InternalServerError', 500));
        this.o.fatal('reload_weights while the weights sleep');
        return;
      }
      vllmLog('INFO', 'gpu_model_runner.py:5689', 'Reloading weights inplace...');
      // The checkpoint is read again (gpu_model_runner.py:5670-5690): at --sim-disk-rate, the weights' share of the memory.
      const took = reloadMs(this.o.knobs.gpuMemoryMib * WEIGHTS_SHARE, this.o.knobs.diskMibPerS, this.o.knobs.wakeTimeMs);
      await sleep(took);
      this.#weightsValid = !this.o.knobs.wakeLosesWeights;
      vllmLog('INFO', 'gpu_model_runner.py:5713', `Reloading and processing weights took ${(took / 1000).toFixed(2)} seconds`);
      // One None per worker (rpc/api_router.py:46-54).
      sendJson(res, 200, { results: [null] });
    });
  }
}
