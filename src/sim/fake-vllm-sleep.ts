/**
 * vLLM's sleep mode in the double (ENGINES.md (e)). The routes exist only
 * with VLLM_SERVER_DEV_MODE=1 (V:vllm/entrypoints/launchers/api_server/routers.py:34-37)
 * and are those of vllm/frontend/entrypoints/serve/dev/sleep/api_router.py:21-44
 * at 055e47c: `POST /sleep?level=1&mode=abort` (level defaults to "1", mode
 * to "abort"; 200 with an empty body), `POST /wake_up` (200, empty) and
 * `GET /is_sleeping` (`{"is_sleeping": bool}`).
 *
 * What happens to requests follows EngineCore.sleep/pause_scheduler
 * (V:vllm/v1/engine/core.py): mode=abort finishes every in-flight request
 * aborted (scheduler.finish_requests(None, FINISHED_ABORTED)); in every mode
 * new requests are accepted and queued, not run, until wake_up resumes the
 * scheduler and flushes them. mode=wait lets the in-flight ones finish first.
 * Level 1 keeps the weights in host RAM, level 2 drops them; both free the
 * GPU memory but the CUDA context, which this double shows as a residue.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { vllmLog } from './engine-log.js';
import type { FakeBatchScheduler } from './fake-batch-scheduler.js';
import { clearGpuUsage, writeGpuUsage } from './fake-gpu-usage.js';
import { errorBody } from './openai-responses.js';
import { sendJson } from './sim-http.js';
import type { SimKnobs } from './sim-knobs.js';

/** What stays on a GPU of a sleeping engine: its CUDA context and what cumem does not manage. */
const RESIDUE_SHARE = 0.02;

export interface FakeSleepOptions {
  /** --enable-sleep-mode (V:vllm/engine/arg_utils.py:919-921). */
  enabled: boolean;
  /** VLLM_SERVER_DEV_MODE (V:vllm/envs.py:1418): bool(int(value)). */
  devMode: boolean;
  knobs: SimKnobs;
  /** The engine's GPUs, from CUDA_VISIBLE_DEVICES. */
  gpus: number[];
}

export class FakeVllmSleep {
  #level = 0;
  #busy = false;

  constructor(
    private readonly o: FakeSleepOptions,
    private readonly scheduler: FakeBatchScheduler,
  ) {}

  get sleeping(): boolean {
    return this.#level > 0;
  }

  /** The memory the loaded engine holds, shown to the fake nvidia-smi. */
  loaded(): void {
    this.#show(this.o.knobs.gpuMemoryMib);
  }

  /** The process exits: it holds nothing. */
  gone(): void {
    if (this.o.knobs.gpuUsageDir) clearGpuUsage(this.o.knobs.gpuUsageDir);
  }

  #show(mib: number): void {
    const { gpuUsageDir, gpuMemoryMib } = this.o.knobs;
    if (gpuUsageDir && gpuMemoryMib > 0) writeGpuUsage(gpuUsageDir, this.o.gpus, mib);
  }

  /** Serves the route when it is one of sleep mode's; false otherwise (then it is a 404, as without dev mode). */
  handle(req: IncomingMessage, res: ServerResponse, path: string, method: string): boolean {
    if (!this.o.devMode) return false;
    const query = new URL(req.url ?? '/', 'http://x').searchParams;
    if (method === 'GET' && path === '/is_sleeping') {
      sendJson(res, 200, { is_sleeping: this.sleeping });
      return true;
    }
    if (method === 'POST' && path === '/sleep') {
      void this.#sleep(res, query.get('level') ?? '1', query.get('mode') ?? 'abort');
      return true;
    }
    if (method === 'POST' && path === '/wake_up') {
      void this.#wake(res);
      return true;
    }
    return false;
  }

  async #sleep(res: ServerResponse, levelText: string, mode: string): Promise<void> {
    const level = Number(levelText);
    // int(level) raising, or a mode pause_scheduler refuses: FastAPI's 500.
    if (!/^-?\d+$/.test(levelText) || !['abort', 'wait', 'keep'].includes(mode)) {
      sendJson(res, 500, errorBody(`invalid sleep level or mode: level=${levelText} mode=${mode}`, 'InternalServerError', 500));
      return;
    }
    if (!this.o.enabled && level >= 1) {
      sendJson(res, 500, errorBody('Sleep mode is not enabled. Enable it with --enable-sleep-mode.', 'InternalServerError', 500));
      return;
    }
    this.scheduler.pause();
    if (mode === 'abort') this.scheduler.abortAll('Request aborted: the engine was put to sleep.');
    if (mode === 'wait') while (this.scheduler.running(false) > 0) await sleep(20);
    this.#level = Math.max(this.#level, level, 0) || 0;
    if (level >= 1) this.#show(this.o.knobs.gpuMemoryMib * RESIDUE_SHARE);
    vllmLog('INFO', 'gpu_worker.py:120', `Sleep mode level ${level}: freed GPU memory (mode=${mode})`);
    res.writeHead(200, { 'content-length': '0' }).end();
  }

  async #wake(res: ServerResponse): Promise<void> {
    if (!this.#busy && this.#level > 0) {
      this.#busy = true;
      await sleep(this.o.knobs.wakeTimeMs);
      this.#show(this.o.knobs.gpuMemoryMib);
      this.#level = 0;
      this.#busy = false;
      vllmLog('INFO', 'api_router.py:36', 'wake up the engine with tags: None');
    }
    this.scheduler.resume();
    res.writeHead(200, { 'content-length': '0' }).end();
  }
}
