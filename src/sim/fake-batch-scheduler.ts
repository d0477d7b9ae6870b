/**
 * The engine loop of the doubles: a batch of at most `maxRunning` requests
 * (the rest wait in a queue), each advancing one token per `tokenLatencyMs`;
 * a prefill step first, which produces the first token (or, for a pooling
 * request, the whole answer). Engines hang their metrics on its hooks, so
 * each counts when its real counterpart does.
 */
import { setTimeout as sleep } from 'node:timers/promises';

/** How often a stalled request looks again whether it may go on. */
const STALL_POLL_MS = 50;

export type FinishReason = 'length' | 'stop';

export interface SchedRequest {
  readonly promptTokens: number;
  /** Tokens to generate; 0 for a pooling (embedding) request. */
  readonly maxTokens: number;
  readonly finishReason: FinishReason;
  readonly pooling: boolean;
  /** Not counted in metrics (SGLang's own /health generation). */
  readonly internal?: boolean;
  /** The request's priority, when it gives one (the queue orders by it under SchedulerOptions.policy 'priority'). */
  readonly priority?: number;
  /** Asked for as a stream (SGLang labels its token counters with it). */
  readonly streaming?: boolean;
  /** The LoRA adapter it is answered by: its name, and the engine's id of the copy it uses (fake-lora.ts). */
  readonly lora?: { readonly name: string; readonly slot: string };
  /** Called for each generated token, in order. */
  onToken?(index: number): void;
  /** Called once, when the last token (or the embedding) is done. */
  onFinish?(): void;
  /** Called once, when the engine drops the request (abort, failure). */
  onAbort?(why: string): void;
}

export interface SchedulerHooks {
  /** The request's prefill completed (its prompt is processed). */
  prefill?(req: SchedRequest): void;
  /** Token `index` generated (index 0 comes out of the prefill step, the rest out of decode steps). */
  token?(req: SchedRequest, index: number): void;
  finish?(req: SchedRequest): void;
  /** The batch or the queue changed size. */
  changed?(): void;
}

export interface SchedulerOptions {
  maxRunning: number;
  tokenLatencyMs: number;
  embedLatencyMs: number;
  /**
   * How the queue is ordered: 'fcfs' (the default) by arrival; 'priority'
   * by the lowest priority value, then arrival, as vLLM's
   * `--scheduling-policy priority` (Request.__lt__, V:vllm/v1/request.py:345-356;
   * V:vllm/v1/core/sched/request_queue.py:131-138). Either way a request
   * only moves ahead of those waiting, never of those running.
   */
  policy?: 'fcfs' | 'priority';
  /**
   * Whether a waiting request may join the batch beside those running; one
   * that may not is skipped and the next one looked at, as vLLM's scheduler
   * skips a request whose adapter would exceed max_loras
   * (V:vllm/v1/core/sched/scheduler.py:790-803 at 017e9f44). None: any may.
   */
  admits?: (req: SchedRequest, running: readonly SchedRequest[]) => boolean;
}

interface Entry {
  req: SchedRequest;
  done: boolean;
}

export class FakeBatchScheduler {
  #opts: SchedulerOptions;
  readonly #hooks: SchedulerHooks;
  readonly #running = new Set<Entry>();
  readonly #waiting: Entry[] = [];
  #stalled = false;
  /** Paused (vLLM's PAUSED_NEW while asleep): new requests queue, none is admitted to the batch. */
  #paused = false;
  /** Set while the batch is busy with the work held before a resume (resume's busyMs). */
  #busy: NodeJS.Timeout | undefined;

  constructor(opts: SchedulerOptions, hooks: SchedulerHooks = {}) {
    this.#opts = opts;
    this.#hooks = hooks;
  }

  /** Each token takes `factor` times as long from now on (a draft that stopped being accepted: fake-vllm-sleep-faults.ts). */
  slowDown(factor: number): void {
    this.#opts = { ...this.#opts, tokenLatencyMs: this.#opts.tokenLatencyMs * factor };
  }

  /** Requests in the batch (metrics count these as running); `internal` ones left out when `countable`. */
  running(countable = true): number {
    return [...this.#running].filter((e) => !(countable && e.req.internal)).length;
  }

  waiting(countable = true): number {
    return this.#waiting.filter((e) => !(countable && e.req.internal)).length;
  }

  /** The requests in the batch and in the queue, for metrics that break them down. */
  snapshot(): { running: SchedRequest[]; waiting: SchedRequest[] } {
    return { running: [...this.#running].map((e) => e.req), waiting: this.#waiting.map((e) => e.req) };
  }

  /** From now on no step makes progress: requests stay where they are. */
  stall(): void {
    this.#stalled = true;
  }

  /** Steps make progress again (a peer that was silent talks again). */
  unstall(): void {
    this.#stalled = false;
  }

  /** New requests wait in the queue until resume() (V:vllm/v1/engine/core.py pause_scheduler: "All pause modes queue new adds"). */
  pause(): void {
    this.#paused = true;
  }

  /**
   * Admits the requests queued while paused (resume_scheduler: "flush any
   * requests queued while paused"). `busyMs`: the batch is taken this long
   * first by the work the engine held (SimKnobs.wakeQueueDelayMs): nothing
   * queued is admitted meanwhile, whatever its priority.
   */
  resume(busyMs = 0): void {
    this.#paused = false;
    if (busyMs > 0) {
      clearTimeout(this.#busy);
      this.#busy = setTimeout(() => {
        this.#busy = undefined;
        this.#admit();
      }, busyMs).unref();
    }
    this.#admit();
  }

  /** Queues a request; returns a function that drops it (the client went away). */
  submit(req: SchedRequest): () => void {
    const entry: Entry = { req, done: false };
    const p = req.priority ?? 0;
    // Priority: ahead of every waiting request of a higher value; FCFS among equals (arrival order).
    const at = this.#opts.policy === 'priority' ? this.#waiting.findIndex((e) => (e.req.priority ?? 0) > p) : -1;
    if (at === -1) this.#waiting.push(entry);
    else this.#waiting.splice(at, 0, entry);
    this.#admit();
    return () => this.#drop(entry);
  }

  /** Drops every request, telling each why. */
  abortAll(why: string): void {
    const all = [...this.#running, ...this.#waiting];
    this.#running.clear();
    this.#waiting.length = 0;
    for (const e of all) {
      if (e.done) continue;
      e.done = true;
      e.req.onAbort?.(why);
    }
    this.#hooks.changed?.();
  }

  #drop(entry: Entry): void {
    if (entry.done) return;
    entry.done = true;
    this.#running.delete(entry);
    const i = this.#waiting.indexOf(entry);
    if (i !== -1) this.#waiting.splice(i, 1);
    this.#hooks.changed?.();
    this.#admit();
  }

  #admit(): void {
    const admits = this.#opts.admits;
    for (let i = 0; !this.#paused && this.#busy === undefined && this.#running.size < this.#opts.maxRunning && i < this.#waiting.length; ) {
      const entry = this.#waiting[i] as Entry;
      if (admits && !admits(entry.req, [...this.#running].map((e) => e.req))) {
        i++;
        continue;
      }
      this.#waiting.splice(i, 1);
      this.#running.add(entry);
      void this.#run(entry);
    }
    this.#hooks.changed?.();
  }

  /** One step's time, then waits out a stall; false when the request was dropped meanwhile. */
  async #step(entry: Entry, ms: number): Promise<boolean> {
    await sleep(ms);
    while (this.#stalled && !entry.done) await sleep(STALL_POLL_MS);
    return !entry.done;
  }

  async #run(entry: Entry): Promise<void> {
    const { req } = entry;
    if (req.pooling) {
      if (!(await this.#step(entry, this.#opts.embedLatencyMs))) return;
      this.#hooks.prefill?.(req);
    } else {
      for (let i = 0; i < req.maxTokens; i++) {
        if (!(await this.#step(entry, this.#opts.tokenLatencyMs))) return;
        if (i === 0) this.#hooks.prefill?.(req);
        this.#hooks.token?.(req, i);
        req.onToken?.(i);
      }
      // A request for 0 tokens still has its prompt processed.
      if (req.maxTokens === 0) {
        if (!(await this.#step(entry, this.#opts.tokenLatencyMs))) return;
        this.#hooks.prefill?.(req);
      }
    }
    entry.done = true;
    this.#running.delete(entry);
    this.#hooks.finish?.(req);
    req.onFinish?.();
    this.#admit();
  }
}
