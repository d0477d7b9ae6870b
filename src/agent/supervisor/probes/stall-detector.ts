/**
 * Whether an engine that answers /health is generating anything. vLLM issues
 * 52319, 39863 and 11996: an engine deadlocked in a collective or its
 * scheduler keeps /health at 200 (a proxy probing /v1/models missed one for
 * 85 minutes); only its metrics show it: requests running, and a
 * progress counter (tokens, finished requests) that no longer moves.
 *
 * Pure: fed samples, it keeps only the last counter value and when tokens
 * last flowed, so the shard runner owns the timing and this owns the rule.
 */

/** One read of the engine's /metrics; a series the engine did not export is undefined. */
export interface MetricSample {
  /** When it was read (any monotonic clock, in milliseconds). */
  atMs: number;
  requestsRunning: number | undefined;
  /**
   * The engine's progress counters, summed (EngineWatch.progressCounters):
   * tokens generated and prefilled, requests finished. Only its changes count.
   */
  progress: number | undefined;
}

/**
 * - `flowing`: tokens moved since the last sample, or not for long enough to call it a stall;
 * - `idle`: no request running, so a flat counter means nothing;
 * - `stalled`: requests running and no token for stall_timeout;
 * - `unknown`: the engine does not export the series (SGLang without --enable-metrics, vLLM with --disable-log-stats);
 * - `off`: stall_timeout is 0.
 */
export type StallState = 'flowing' | 'idle' | 'stalled' | 'unknown' | 'off';

export interface StallVerdict {
  state: StallState;
  /** One line for ShardStatus.error when stalled ("stalled: 3 requests running, no token generated for 60 s"); a description otherwise. */
  reason: string;
}

export interface StallDetectorOptions {
  /** How long requests may run with a flat token counter before it is a stall; 0 turns detection off. */
  stallTimeoutMs: number;
}

export class StallDetector {
  readonly #stallTimeoutMs: number;
  #lastTokens: number | undefined;
  /**
   * The latest sample at which tokens were seen to move, or at which requests
   * started running after none: from then on a token is owed. Undefined while
   * idle or before the first sample.
   */
  #owedSinceMs: number | undefined;

  constructor(opts: StallDetectorOptions) {
    if (!Number.isFinite(opts.stallTimeoutMs) || opts.stallTimeoutMs < 0) {
      throw new RangeError(`stallTimeoutMs must be a duration of 0 or more, got ${opts.stallTimeoutMs}`);
    }
    this.#stallTimeoutMs = opts.stallTimeoutMs;
  }

  observe(sample: MetricSample): StallVerdict {
    if (this.#stallTimeoutMs === 0) return { state: 'off', reason: 'stall detection is off (supervisor.stall_timeout 0s)' };
    const { atMs, requestsRunning: running, progress: tokens } = sample;
    if (running === undefined || tokens === undefined) {
      // Forget the baseline: a series that comes back may have restarted from 0.
      this.#lastTokens = undefined;
      this.#owedSinceMs = undefined;
      const missing = running === undefined ? 'requests-running gauge' : 'progress counter (tokens, finished requests)';
      return { state: 'unknown', reason: `the engine exports no ${missing}` };
    }

    // Any change is progress, a drop too: a counter that fell belongs to an
    // engine (or metrics process) that restarted, not to one that is stuck.
    const moved = this.#lastTokens !== undefined && tokens !== this.#lastTokens;
    this.#lastTokens = tokens;

    if (running <= 0) {
      this.#owedSinceMs = undefined;
      return { state: 'idle', reason: 'no request running' };
    }
    // The first sample with requests running starts the clock rather than
    // judging: a request that just arrived has had no time to make a token.
    if (moved || this.#owedSinceMs === undefined) {
      this.#owedSinceMs = atMs;
      return { state: 'flowing', reason: `${requests(running)} running${moved ? ', tokens generated' : ''}` };
    }
    const flatMs = atMs - this.#owedSinceMs;
    const flatS = Math.floor(flatMs / 1000);
    if (flatMs >= this.#stallTimeoutMs) {
      return { state: 'stalled', reason: `stalled: ${requests(running)} running, no token generated for ${flatS} s` };
    }
    return { state: 'flowing', reason: `${requests(running)} running, no token for ${flatS} s yet` };
  }
}

function requests(n: number): string {
  return `${n} request${n === 1 ? '' : 's'}`;
}
