/**
 * What an engine was doing at the agent's latest read of its /metrics:
 * requests held and tokens per second (issue 29). Read from the /metrics
 * answer the health watch already fetches for stall detection, so that
 * `ctl status`, `ctl top` and a Prometheus scrape cost the engine nothing:
 * a view refreshed every second on every node would otherwise be one more
 * /metrics read per second per engine, and vLLM's is a few hundred KiB.
 */
export interface EngineLoad {
  /** Requests running and waiting (EngineWatch.inFlightGauges, summed); undefined when unknown. */
  inFlight: number | undefined;
  /** Growth of the token counter per second between the two latest reads; undefined when unknown. */
  tokensPerSecond: number | undefined;
}

/** Nothing read, or nothing that can be trusted now. */
export const UNKNOWN_LOAD: EngineLoad = Object.freeze({ inFlight: undefined, tokensPerSecond: undefined });

/** One read of /metrics, as the load meter needs it; a series the engine did not export is undefined. */
export interface LoadSample {
  /** When it was read (a monotonic clock, ms). */
  atMs: number;
  inFlight: number | undefined;
  /** The generated-token counter's value (EngineWatch.progressCounters[0]: SGLang's decode tokens alone). */
  tokens: number | undefined;
}

/**
 * Turns successive counter reads into a rate. Pure: fed samples, it keeps
 * only the last one, so the health watch owns the timing.
 */
export class LoadMeter {
  #last: { atMs: number; tokens: number } | undefined;

  observe(sample: LoadSample): EngineLoad {
    const { atMs, tokens } = sample;
    const last = this.#last;
    this.#last = tokens === undefined ? undefined : { atMs, tokens };
    let tokensPerSecond: number | undefined;
    // A counter that fell belongs to an engine (or metrics process) that
    // restarted its count: its rate over that gap is no rate at all.
    if (last && tokens !== undefined && tokens >= last.tokens && atMs > last.atMs) {
      tokensPerSecond = ((tokens - last.tokens) * 1000) / (atMs - last.atMs);
    }
    return { inFlight: sample.inFlight, tokensPerSecond };
  }
}
