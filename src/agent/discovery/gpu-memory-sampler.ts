import { type Logger, silentLogger } from '../../lib/logger.js';
import { parseMib } from './parse-nvidia-csv.js';
import { runNvidiaSmi } from './run-nvidia-smi.js';

export interface GpuMemorySamplerOptions {
  nvidiaSmi: string;
  /** Limit for one refresh; a slower nvidia-smi is killed and the last reading kept. */
  timeoutMs: number;
  logger?: Logger;
}

/**
 * GPU memory in use, for heartbeats. The agent reads `latest()`, which never
 * waits; `refresh()` runs one bounded `--query-gpu=memory.used` in the
 * background. A failed or slow refresh keeps the last good reading and is
 * logged once, not on every heartbeat, until a refresh succeeds again (which
 * is logged too, so the log says when readings were stale).
 */
export class GpuMemorySampler {
  readonly #opts: GpuMemorySamplerOptions;
  readonly #log: Logger;
  #latest: number[] = [];
  #inFlight: Promise<void> | undefined;
  #failing = false;

  constructor(opts: GpuMemorySamplerOptions) {
    this.#opts = opts;
    this.#log = opts.logger ?? silentLogger;
  }

  /** MB used per GPU in inventory order, from the last good refresh; [] before the first. */
  latest(): number[] {
    return [...this.#latest];
  }

  /**
   * One refresh. Concurrent callers share the call in flight: a heartbeat
   * timer that fires while nvidia-smi is slow must not pile up processes.
   * Resolves after the attempt whatever its outcome; rejects only on abort.
   */
  refresh(signal?: AbortSignal): Promise<void> {
    if (!this.#inFlight) {
      this.#inFlight = this.#refresh(signal).finally(() => {
        this.#inFlight = undefined;
      });
    }
    return this.#inFlight;
  }

  async #refresh(signal: AbortSignal | undefined): Promise<void> {
    const r = await runNvidiaSmi(this.#opts.nvidiaSmi, ['--query-gpu=memory.used', '--format=csv,noheader,nounits'], {
      timeoutMs: this.#opts.timeoutMs,
      signal,
    });
    const lines = r.ok ? r.stdout.split(/\r?\n/).map((l) => l.trim()).filter((l) => l !== '') : [];
    if (!r.ok || lines.length === 0) {
      const why = r.ok ? 'nvidia-smi listed no GPUs' : r.reason;
      if (!this.#failing) this.#log.warn({ err: why }, 'GPU memory refresh failed; heartbeats repeat the last reading until it recovers');
      this.#failing = true;
      return;
    }
    // A GPU in a fault state answers "[GPU requires reset]" for its cell:
    // its slot keeps the previous value so the others stay in their places.
    this.#latest = lines.map((l, i) => parseMib(l) ?? this.#latest[i] ?? 0);
    if (this.#failing) this.#log.info('GPU memory refresh recovered');
    this.#failing = false;
  }
}
