import { type ChildProcess, spawn } from 'node:child_process';
import { formatDuration } from '../../lib/duration.js';
import { errnoCode } from '../../lib/errors.js';
import { type Logger, silentLogger } from '../../lib/logger.js';
import type { NvmlLibrary } from '../discovery/nvml/nvml-library.js';
import { parseMib } from '../discovery/parse-nvidia-csv.js';
import { FreshGpuReads, type GpuReadings, killGroup } from './fresh-gpu-reads.js';

export interface GpuMemorySamplerOptions {
  nvidiaSmi: string;
  /** How often nvidia-smi reports: the heartbeat interval, so each heartbeat carries a fresh reading. */
  intervalMs: number;
  /** How late a report may be before nvidia-smi is taken for hung, killed and started again. */
  timeoutMs: number;
  /** Open NVML: readings come from it in-process, and no nvidia-smi runs (unless it lacks nvmlDeviceGetMemoryInfo_v2). */
  nvml?: NvmlLibrary;
  logger?: Logger;
}

/** The agent's floor for `intervalMs`: GPU memory read more often tells nobody anything. */
export const MIN_GPU_MEMORY_INTERVAL_MS = 1000;

/** The longest wait between attempts to start a failing nvidia-smi. */
const MAX_RESTART_DELAY_MS = 60_000;
/**
 * Loops killed for silence without a single reading, in a row, after which
 * nvidia-smi is taken not to report in loop mode at all (one whose output
 * sits in a buffer until it fills, say) and is run once per interval instead.
 */
const SILENT_LOOPS_BEFORE_ONE_SHOT = 3;
/** A line of output kept as the reason of a failure: nvidia-smi explains itself in one. */
const MAX_REASON_CHARS = 200;

/**
 * GPU memory in use, for heartbeats. One long-lived `nvidia-smi
 * --query-gpu=index,memory.used --loop-ms=<interval>` reports every GPU once
 * per interval; `latest()` returns the last report and never waits.
 *
 * One process for the agent's life instead of one per heartbeat: starting
 * nvidia-smi initialises NVML for every GPU, which costs far more than a
 * reading, and the agent paid for a fork per heartbeat besides. The change
 * took the agent's CPU at a 1 s heartbeat from 1.38 % to 0.70 %
 * (bench/RESULTS.md, figure 5b).
 *
 * A loop that exits, cannot start, or goes silent for longer than the timeout
 * is killed and started again with backoff (interval doubling to a minute).
 * The next one starts only once the last has exited, so an nvidia-smi stuck
 * in the kernel (a wedged driver ignores even SIGKILL) is never joined by
 * another.
 * Meanwhile heartbeats repeat the last reading; the failure is logged once,
 * and so is the recovery, so the log says when readings were stale. If the
 * agent dies without closing the sampler, nvidia-smi's next write to the
 * dead pipe ends it (SIGPIPE): no loop outlives its agent by more than an
 * interval. Should loops keep going silent without a single reading,
 * nvidia-smi is run once per interval instead, and the log says so.
 */
export class GpuMemorySampler {
  readonly #opts: GpuMemorySamplerOptions;
  readonly #log: Logger;
  #latest: number[] = [];
  #child: ChildProcess | undefined;
  #startedAtMs = 0;
  #lastReadingAtMs = 0;
  /** Why the running loop is being killed, when it is the sampler that kills it. */
  #killReason: string | undefined;
  /** Last line that was not a reading: the reason, when the loop then exits. */
  #lastOutput = '';
  #failing = false;
  #failuresInARow = 0;
  #watchdog: NodeJS.Timeout | undefined;
  #restartTimer: NodeJS.Timeout | undefined;
  #closed = false;
  /** Readings the running nvidia-smi has given. */
  #readingsThisRun = 0;
  #silentLoopsInARow = 0;
  /** One `--query-gpu` per interval instead of a loop: see SILENT_LOOPS_BEFORE_ONE_SHOT. */
  #oneShot = false;
  #nvmlTimer: NodeJS.Timeout | undefined;
  /** readNow()'s reads through nvidia-smi, one at a time. */
  readonly #fresh: FreshGpuReads;

  constructor(opts: GpuMemorySamplerOptions) {
    this.#opts = opts;
    this.#log = opts.logger ?? silentLogger;
    this.#fresh = new FreshGpuReads({ nvidiaSmi: opts.nvidiaSmi, timeoutMs: opts.timeoutMs, onReadings: (r, at) => this.#applyFresh(r, at) });
  }

  /** MB used per GPU, indexed by nvidia-smi's GPU index, from the last report; [] before the first. */
  latest(): number[] {
    return [...this.#latest];
  }

  /** When the last reading came (Date.now() ms); 0 before the first. A sleep waits for one newer than its request. */
  get readAtMs(): number {
    return this.#lastReadingAtMs;
  }

  /**
   * A reading of every GPU taken after this call, for a sleep or wake
   * waiting to see memory change (issue 36 item 8: a wake whose engine call
   * took 100 ms was reported READY after 875 ms, waiting for this sampler's
   * next tick) and a shard's memory at READY (issue 51). NVML: read
   * in-process at once. Otherwise one `nvidia-smi --query-gpu` beside the
   * loop, begun on the loop's next turn and shared by every ask made before
   * it began; asks made while it runs share the next (FreshGpuReads). What
   * it read, by GPU index, a GPU without a number in it left out; it also
   * updates latest() and readAtMs, so heartbeats carry the fresher figure.
   *
   * Rejects when no reading could be taken (nvidia-smi missing, failing, or
   * silent past `timeoutMs`, when it is killed); callers then fall back to
   * latest(). While an nvidia-smi given up on has not exited (a wedged driver
   * ignores even SIGKILL), asks are refused at once rather than start another.
   */
  readNow(): Promise<number[]> {
    if (this.#closed) return Promise.reject(new Error('the GPU memory sampler is closed'));
    if (this.#opts.nvml?.has('nvmlDeviceGetMemoryInfo_v2')) {
      this.#readNvml();
      return Promise.resolve(this.latest());
    }
    return this.#fresh.ask();
  }

  /** A fresh read's readings, applied unless the loop has reported since it began. */
  #applyFresh(readings: GpuReadings, begunAtMs: number): void {
    // A loop report that came while this one ran is as fresh and stays.
    if (this.#lastReadingAtMs > begunAtMs) return;
    for (const [index, mb] of readings) {
      for (let i = this.#latest.length; i < index; i++) this.#latest[i] = 0;
      this.#latest[index] = mb ?? this.#latest[index] ?? 0;
    }
    // When it began, not when it came: a sleep waits for a reading taken after its request.
    this.#lastReadingAtMs = begunAtMs;
  }

  /** The pid of the running nvidia-smi, if one runs. */
  get pid(): number | undefined {
    return this.#child?.pid;
  }

  /** Starts the loop. Idempotent; does nothing after close(). */
  start(): void {
    if (this.#closed || this.#child || this.#restartTimer || this.#nvmlTimer) return;
    // An NVML without the _v2 call would count reserved memory as used: nvidia-smi reads it then.
    if (this.#opts.nvml?.has('nvmlDeviceGetMemoryInfo_v2')) {
      this.#readNvml();
      this.#nvmlTimer = setInterval(() => this.#readNvml(), this.#opts.intervalMs).unref();
      return;
    }
    if (!this.#watchdog) this.#armWatchdog(this.#opts.intervalMs);
    this.#spawn();
  }

  /** Stops the loop for good: its process is killed and no restart is scheduled. */
  close(): void {
    this.#closed = true;
    clearInterval(this.#nvmlTimer);
    this.#nvmlTimer = undefined;
    clearTimeout(this.#watchdog);
    clearTimeout(this.#restartTimer);
    this.#watchdog = this.#restartTimer = undefined;
    const child = this.#child;
    this.#child = undefined;
    if (child) killGroup(child);
    this.#fresh.close();
  }

  #spawn(): void {
    const args = ['--query-gpu=index,memory.used', '--format=csv,noheader,nounits'];
    if (!this.#oneShot) args.push(`--loop-ms=${this.#opts.intervalMs}`);
    // Its own process group, killed whole: a wrapper script named nvidia-smi
    // (a container shim) must not leave the real one behind.
    const child = spawn(this.#opts.nvidiaSmi, args, {
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
      // Parsers read English: the C locale keeps numbers and messages stable.
      env: { ...process.env, LC_ALL: 'C' },
    });
    // The agent's life is its stream's, not this loop's: never keep it alive.
    child.unref();
    (child.stdout as { unref?: () => void } | null)?.unref?.();
    (child.stderr as { unref?: () => void } | null)?.unref?.();
    this.#child = child;
    this.#startedAtMs = Date.now();
    this.#killReason = undefined;
    this.#lastOutput = '';
    this.#readingsThisRun = 0;
    child.on('error', (err) => {
      const code = errnoCode(err);
      const reason = code === 'ENOENT' ? `${this.#opts.nvidiaSmi} not found` : code === 'EACCES' ? `${this.#opts.nvidiaSmi} is not executable` : err.message;
      this.#gone(child, reason);
    });
    // 'close', not 'exit': only then has all its output been read.
    child.on('close', (code, signal) => {
      if (code === 0 && this.#oneShot && this.#readingsThisRun > 0 && !this.#killReason) {
        this.#answered(child);
        return;
      }
      if (code === 0 && !this.#oneShot && this.#readingsThisRun > 0 && !this.#killReason) {
        // A loop that ends after one report is not a loop (a wrapper or a
        // container shim that drops --loop-ms): taking each end for a failure
        // logged "stopped" and "resumed" every interval for ever.
        this.#oneShot = true;
        this.#log.warn({ nvidiaSmi: this.#opts.nvidiaSmi }, 'nvidia-smi ignores --loop-ms (it printed one report and exited); running it once per interval instead');
        this.#answered(child);
        return;
      }
      const how = signal ? `was killed by ${signal}` : `exited with code ${code}`;
      this.#gone(child, `nvidia-smi ${how}${this.#lastOutput ? `: ${this.#lastOutput}` : ''}`);
    });
    let partial = '';
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      const lines = (partial + chunk).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) this.#line(line);
    });
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      const last = chunk.trim().split('\n').at(-1)?.trim();
      if (last) this.#lastOutput = last.slice(0, MAX_REASON_CHARS);
    });
  }

  #line(raw: string): void {
    const line = raw.trim();
    if (line === '') return;
    const m = /^(\d+)\s*,\s*(.*)$/.exec(line);
    if (!m) {
      this.#lastOutput = line.slice(0, MAX_REASON_CHARS);
      return;
    }
    const index = Number(m[1]);
    // A GPU in a fault state answers "[GPU requires reset]" for its cell: its
    // slot keeps the previous value so the others stay in their places.
    const mb = parseMib(m[2] as string);
    for (let i = this.#latest.length; i < index; i++) this.#latest[i] = 0;
    this.#latest[index] = mb ?? this.#latest[index] ?? 0;
    this.#lastReadingAtMs = Date.now();
    this.#readingsThisRun++;
    this.#silentLoopsInARow = 0;
    this.#failuresInARow = 0;
    if (this.#failing) this.#log.info('GPU memory readings resumed');
    this.#failing = false;
  }

  /**
   * One reading of every GPU through NVML, in-process: microseconds, not a
   * process. A GPU that does not answer keeps its last value, and the
   * failure is logged once, as for nvidia-smi.
   */
  #readNvml(): void {
    const nvml = this.#opts.nvml as NvmlLibrary;
    let failure: string | undefined;
    for (let i = 0; i < nvml.gpuCount; i++) {
      const m = nvml.memory(i);
      for (let k = this.#latest.length; k < i; k++) this.#latest[k] = 0;
      if (m.ok) this.#latest[i] = Math.floor(m.value.used / (1024 * 1024));
      else {
        this.#latest[i] ??= 0;
        failure ??= `GPU ${i}: ${m.reason}`;
      }
    }
    this.#lastReadingAtMs = Date.now();
    if (failure !== undefined && !this.#failing) this.#log.warn({ err: failure }, 'GPU memory readings failed through NVML; heartbeats repeat the last reading');
    else if (failure === undefined && this.#failing) this.#log.info('GPU memory readings resumed');
    this.#failing = failure !== undefined;
  }

  /**
   * The silence check, on the grid of an every-interval check, at the first
   * point of it where silence could be found: with readings coming, that is
   * once a limit (interval + timeout), not once an interval, which woke the
   * agent every second for nothing (bench figures 5b and 16). A loop that
   * goes silent is killed at the same check an every-interval watchdog
   * would have killed it at.
   */
  #armWatchdog(delayMs: number): void {
    this.#watchdog = setTimeout(() => {
      if (this.#closed) return;
      this.#armWatchdog(this.#checkSilence());
    }, delayMs).unref();
  }

  /** Kills a loop silent past the limit; returns when (a whole number of intervals from now) to check next. */
  #checkSilence(): number {
    const interval = this.#opts.intervalMs;
    const child = this.#child;
    if (!child || this.#killReason) return interval;
    const since = Math.max(this.#startedAtMs, this.#lastReadingAtMs);
    const limitMs = interval + this.#opts.timeoutMs;
    const silentMs = Date.now() - since;
    if (silentMs <= limitMs) return nextSilenceCheckMs(silentMs, limitMs, interval);
    this.#killReason = `nvidia-smi gave no reading for ${formatDuration(limitMs)}`;
    killGroup(child);
    return interval;
  }

  /** A one-shot nvidia-smi answered: the next one runs an interval later. */
  #answered(child: ChildProcess): void {
    if (child !== this.#child) return;
    this.#child = undefined;
    if (this.#closed) return;
    this.#restartAfter(this.#opts.intervalMs);
  }

  /** The loop ended (or never started): say so once, and start it again after a backoff. */
  #gone(child: ChildProcess, reason: string): void {
    if (child !== this.#child) return; // already handled, or closed
    this.#child = undefined;
    killGroup(child); // a wrapper's children, if the wrapper alone exited
    if (this.#closed) return;
    if (!this.#oneShot && this.#killReason && this.#readingsThisRun === 0) {
      this.#silentLoopsInARow++;
      if (this.#silentLoopsInARow >= SILENT_LOOPS_BEFORE_ONE_SHOT) {
        this.#oneShot = true;
        this.#log.warn(
          { err: this.#killReason, loops: this.#silentLoopsInARow },
          'nvidia-smi gave no reading in loop mode; running it once per interval instead',
        );
      }
    }
    if (!this.#failing) {
      this.#log.warn({ err: this.#killReason ?? reason }, 'GPU memory readings stopped; heartbeats repeat the last reading until they resume');
    }
    this.#failing = true;
    const delayMs = Math.min(MAX_RESTART_DELAY_MS, this.#opts.intervalMs * 2 ** this.#failuresInARow);
    this.#failuresInARow++;
    this.#restartAfter(delayMs);
  }

  #restartAfter(delayMs: number): void {
    this.#restartTimer = setTimeout(() => {
      this.#restartTimer = undefined;
      if (!this.#closed) this.#spawn();
    }, delayMs).unref();
  }
}

/** When the check after one that found `silentMs` (at most `limitMs`) is due: the first whole number of intervals after which silence would pass the limit. */
export function nextSilenceCheckMs(silentMs: number, limitMs: number, intervalMs: number): number {
  return (Math.floor((limitMs - silentMs) / intervalMs) + 1) * intervalMs;
}
