/**
 * Where new requests wait in the SGLang double's tokenizer before they reach
 * the scheduler: POST /pause_generation and /continue_generation, and the
 * model_update_lock a weight update takes (fake-sglang-memory-saver.ts).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FakeBatchScheduler, SchedRequest } from './fake-batch-scheduler.js';
import { type FakeSglangMemorySaver, readBodyObject } from './fake-sglang-memory-saver.js';
import { errorBody } from './openai-responses.js';
import { sendJson } from './sim-http.js';

/** How often a weight update that waits for the requests in flight looks again. */
const UPDATE_LOCK_POLL_MS = 20;

export interface SglangPauseDeps {
  scheduler: FakeBatchScheduler;
  memory: Pick<FakeSglangMemorySaver, 'released'>;
  /** An exception in the scheduler: the tree dies (fake-sglang.ts killTree). */
  killTree: (why: string) => void;
  /** Installs the SIGTERM handler, lazily, at the first request (fake-sglang.ts). */
  installSigterm: () => void;
  /** SimKnobs.wakeQueueDelayMs: the batch is busy this long after a continue with what was held. */
  continueBusyMs?: number;
}

/**
 * Requests waiting in the tokenizer, each in rid_to_state. One whose
 * client went away leaves it when its handler is cancelled: a stream's,
 * which Starlette cancels on disconnect (the except at :822-831 discards
 * its state); a health check's, popped by its handler. A plain request's
 * handler is not cancelled, so it stays *(inferred)*.
 */
interface Held {
  go: () => void;
  req: SchedRequest;
  dropped: boolean;
}

export class FakeSglangPause {
  readonly #d: SglangPauseDeps;
  /**
   * Paused by /pause_generation: new requests (health checks too) wait in
   * the tokenizer, before they reach the scheduler, until
   * /continue_generation (S:python/sglang/srt/managers/tokenizer_manager.py:804-805, 2010-2029).
   */
  #generationPaused = false;
  /**
   * A weight update holds the model_update_lock's writer side: new requests
   * wait for its reader side (tokenizer_manager.py:807, 2045-2052).
   */
  #updatingWeights = false;
  readonly #held: Held[] = [];

  constructor(d: SglangPauseDeps) {
    this.#d = d;
  }

  heldCount(): number {
    return this.#held.filter((h) => !(h.dropped && (h.req.streaming === true || h.req.internal === true))).length;
  }

  #releaseHeld(): void {
    if (this.#generationPaused || this.#updatingWeights) return;
    for (const h of this.#held.splice(0)) h.go();
  }

  /** tokenizer_manager.py:2045-2052: no lock while paused; otherwise new requests wait while the running ones finish. */
  async updateLock(): Promise<() => void> {
    if (this.#generationPaused) return () => {};
    this.#updatingWeights = true;
    while (this.#d.scheduler.running(false) + this.#d.scheduler.waiting(false) > 0) await sleep(UPDATE_LOCK_POLL_MS);
    return () => {
      this.#updatingWeights = false;
      this.#releaseHeld();
    };
  }

  #toScheduler(req: SchedRequest): () => void {
    // fake-sglang-memory-saver.ts: nothing stops a forward pass on released memory (inferred).
    if (this.#d.memory.released) {
      this.#d.killTree('Scheduler hit an exception: RuntimeError: CUDA error: an illegal memory access was encountered (a forward pass on memory released by release_memory_occupation)');
      return () => {};
    }
    return this.#d.scheduler.submit(req);
  }

  submit(req: SchedRequest): () => void {
    this.#d.installSigterm();
    if (!this.#generationPaused && !this.#updatingWeights) return this.#toScheduler(req);
    let drop: (() => void) | undefined;
    const h: Held = {
      req,
      dropped: false,
      go: () => {
        if (!h.dropped) drop = this.#toScheduler(req);
      },
    };
    this.#held.push(h);
    return () => {
      h.dropped = true;
      drop?.();
    };
  }

  /**
   * POST /pause_generation `{"mode": "abort"|"retract"|"in_place"}` (default
   * abort) and /continue_generation, ADMIN_OPTIONAL, each 200 with a message
   * (S:python/sglang/srt/entrypoints/http_server.py:1685-1708; io_struct.py:1700-1719).
   * abort ends every request in flight (tokenizer_manager.py:2010-2022);
   * retract and in_place stop the scheduler's batches instead (scheduler.py:4584-4586, 4673-4693).
   */
  async route(req: IncomingMessage, res: ServerResponse, pause: boolean): Promise<void> {
    const body = await readBodyObject(req);
    if (typeof body === 'string') return sendJson(res, 400, errorBody(body, 'Bad Request', 400));
    if (!pause) {
      this.#generationPaused = false;
      this.#d.scheduler.resume(this.#d.continueBusyMs);
      this.#releaseHeld();
      sendJson(res, 200, { message: 'Generation continued successfully.', status: 'ok' });
      return;
    }
    const mode = body.mode ?? 'abort';
    if (mode !== 'abort' && mode !== 'retract' && mode !== 'in_place') {
      return sendJson(res, 400, errorBody(`1 validation error: {'type': 'literal_error', 'loc': ('body', 'mode'), 'msg': "Input should be 'abort', 'retract' or 'in_place'"}`, 'Bad Request', 400));
    }
    this.#generationPaused = true;
    if (mode === 'abort') this.#d.scheduler.abortAll('Abort all requests: generation paused.');
    else this.#d.scheduler.pause();
    sendJson(res, 200, { message: 'Generation paused successfully.', status: 'ok' });
  }
}
