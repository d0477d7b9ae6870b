import { type ChildProcess, spawn } from 'node:child_process';
import { formatDuration } from '../../lib/duration.js';
import { parseMib } from '../discovery/parse-nvidia-csv.js';

/** `index, MiB` of one report; a GPU whose cell is not a number (a fault marker) is undefined. */
export type GpuReadings = [number, number | undefined][];

export interface FreshGpuReadsOptions {
  nvidiaSmi: string;
  /** How long one read may stay silent before its nvidia-smi is killed and its asks are refused. */
  timeoutMs: number;
  /** Every read's readings and when the read began (Date.now() ms), before its asks hear them. */
  onReadings: (readings: GpuReadings, begunAtMs: number) => void;
}

interface Waiter {
  resolve: (readings: number[]) => void;
  reject: (err: Error) => void;
}

/**
 * Fresh readings of every GPU's memory on demand, one `nvidia-smi
 * --query-gpu` at a time, each shared by every ask made before it began and
 * after the read before it began: a read is never handed to an ask made
 * after it started (an engine's memory may change in between; a READY
 * shard's memory is its own only in a read begun after its READY), and
 * asks that come while one runs start one more when it ends, not one each.
 *
 * A read begins on the loop's next turn after its first ask, never inside
 * the ask's own tick: spawning blocks the whole agent until nvidia-smi has
 * exec'd (libuv waits for it), which on 2 loaded cores took 13-164 ms, and
 * the READY that asked, its status queued in the same tick, went out only
 * after it (bench figure 16, 64 shards becoming READY 100 ms apart: 58 of 64
 * READYs waited for a spawn of their own).
 *
 * What a read answers is its own readings, by GPU index; a GPU whose cell
 * was a fault marker, or that it did not list, has none (a shard on it has
 * no fresh reading; the others do). A read that fails (nvidia-smi missing,
 * exits non-zero, prints nothing) rejects its asks alone: those made while
 * it ran get a read of their own. One silent past `timeoutMs` is killed and
 * rejects its asks and those made while it ran, as when they shared it;
 * until it has exited (a wedged driver ignores even SIGKILL) every ask is
 * refused at once rather than start another.
 */
export class FreshGpuReads {
  readonly #opts: FreshGpuReadsOptions;
  /** The asks the running read answers. */
  #current: Waiter[] | undefined;
  /** The asks made since it began: the next read's. */
  #next: Waiter[] | undefined;
  /** The running read's nvidia-smi until it has exited, even once given up on. */
  #child: ChildProcess | undefined;
  #scheduled = false;
  #closed = false;

  constructor(opts: FreshGpuReadsOptions) {
    this.#opts = opts;
  }

  /** Readings by GPU index from a read begun after this call; rejects when it gave none. */
  ask(): Promise<number[]> {
    if (this.#closed) return Promise.reject(new Error('the GPU memory sampler is closed'));
    if (this.#child && !this.#current) return Promise.reject(new Error('the last nvidia-smi asked for a reading has not exited'));
    return new Promise((resolve, reject) => {
      this.#next ??= [];
      this.#next.push({ resolve, reject });
      this.#schedule();
    });
  }

  /** Kills a running read; every ask waiting is refused. */
  close(): void {
    this.#closed = true;
    if (this.#child) killGroup(this.#child);
    const closed = new Error('the GPU memory sampler is closed');
    settle(this.#current, closed);
    settle(this.#next, closed);
    this.#current = this.#next = undefined;
  }

  /** The next read, on the loop's next turn, unless one runs (its end starts it). */
  #schedule(): void {
    if (this.#scheduled || this.#current || this.#child || !this.#next) return;
    this.#scheduled = true;
    setImmediate(() => {
      this.#scheduled = false;
      this.#begin();
    });
  }

  #begin(): void {
    const batch = this.#next;
    if (!batch || this.#closed || this.#current || this.#child) return;
    this.#next = undefined;
    this.#current = batch;
    const begunAtMs = Date.now();
    const child = spawn(this.#opts.nvidiaSmi, ['--query-gpu=index,memory.used', '--format=csv,noheader,nounits'], {
      stdio: ['ignore', 'pipe', 'ignore'],
      // Its own group, killed whole (a wrapper script's children too).
      detached: true,
      env: { ...process.env, LC_ALL: 'C' },
    });
    this.#child = child;
    let out = '';
    const end = (err: Error | undefined, readings: GpuReadings = []) => {
      clearTimeout(timer);
      if (this.#current !== batch) return;
      this.#current = undefined;
      if (err) settle(batch, err);
      else {
        if (!this.#closed) this.#opts.onReadings(readings, begunAtMs);
        const byGpu: number[] = [];
        for (const [index, mib] of readings) if (mib !== undefined) byGpu[index] = mib;
        for (const w of batch) w.resolve([...byGpu]);
      }
      this.#schedule();
    };
    const gone = () => {
      if (this.#child !== child) return false;
      this.#child = undefined;
      return true;
    };
    // Killed when silent past the limit; a driver that hangs nvidia-smi hangs the loop too.
    const timer = setTimeout(() => {
      killGroup(child);
      const err = new Error(`nvidia-smi gave no reading in ${formatDuration(this.#opts.timeoutMs)}`);
      // Those asked while it hung are refused with it, as when they shared it: none waits on a process that may never exit.
      settle(this.#next, err);
      this.#next = undefined;
      end(err);
    }, this.#opts.timeoutMs);
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      out += chunk;
    });
    child.on('error', (err) => {
      if (gone()) end(err);
    });
    child.on('close', (code) => {
      if (!gone()) return;
      const readings = code === 0 ? parseReadings(out) : [];
      if (readings.length === 0) end(new Error(`nvidia-smi ${code === 0 ? 'printed no reading' : `exited with code ${code}`}`));
      else end(undefined, readings);
    });
  }
}

function settle(batch: Waiter[] | undefined, err: Error): void {
  for (const w of batch ?? []) w.reject(err);
}

export function killGroup(child: ChildProcess): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, 'SIGKILL');
  } catch {
    // ESRCH: the group is already gone.
  }
}

/** `index, MiB` lines of a `--query-gpu` report; a fault marker in a cell is undefined. */
export function parseReadings(out: string): GpuReadings {
  const readings: GpuReadings = [];
  for (const line of out.split('\n')) {
    const m = /^(\d+)\s*,\s*(.*)$/.exec(line.trim());
    if (m) readings.push([Number(m[1]), parseMib(m[2] as string)]);
  }
  return readings;
}
