import { readFileSync } from 'node:fs';
import { rename, writeFile } from 'node:fs/promises';
import { create } from '@bufbuild/protobuf';
import { type CachedModel, type ModelWarmth, ModelWarmthSchema, ShardState, type TimeToReady, TimeToReadySchema } from '../../gen/llmgw/v1/agent_pb.js';
import { MIN_RATE_BYTES, modelledTimes, type NodeRates } from '../../models/modelled-warmth.js';
import { errorMessage } from '../../lib/errors.js';
import type { Logger } from '../../lib/logger.js';
import { SerialWrites } from '../../lib/files/serial-writes.js';
import { isLeaving, isWarmedUp } from '../../lib/shard-states.js';
import { nextP90Margin, rungSpread } from './rung-spread.js';
import type { ShardSnapshot, ShardTransition } from '../supervisor/shard/shard-snapshot.js';

/*
 * How long this node took to bring each model to READY, by where it came
 * from (issue 41): measured at every launch and wake, kept across agent
 * restarts, reported in Inventory.warmth beside the rung the node offers
 * now. Never guessed: a rung nothing came from has no estimate.
 */

/**
 * Where a start or wake came from. `+compile`: the store also held a compile
 * cache for the model and engine (hasCompileCache), so the start skipped the
 * compile. A wake is timed by the level it slept at (issue 47): level 1 copies
 * the weights back from host RAM, vLLM's level 2 reads them from disk again
 * (V:vllm/v1/worker/gpu_model_runner.py:5670-5690), so one figure fits neither.
 */
export type WarmthFrom = 'sleeping-l1' | 'sleeping-l2' | 'page-cache+compile' | 'page-cache' | 'store+compile' | 'store' | 'hub' | 'unmanaged';

/** At least this share of a model's bytes in the page cache makes it warm in memory: the rest is read from disk in a moment. */
export const PAGE_CACHE_SHARE = 0.9;

/**
 * Samples kept per rung, for its spread (P50, P90; rung-spread.ts): with 20
 * the P90 rests on the 19th of them, one a single slow start does not become.
 */
export const WARMTH_SAMPLES = 20;
/** Of those, the last few the median is taken over: it follows a node that changed (a new disk, a new driver). */
export const WARMTH_MEDIAN_SAMPLES = 8;
/** Models kept, the most recently measured: a node that served thousands of models over a year keeps a bounded file. */
export const WARMTH_MODELS = 128;

interface Entry {
  model: string;
  engine: string;
  profile: string;
  updatedAtMs: number;
  /** Milliseconds to READY, oldest first, per rung. */
  samples: Partial<Record<WarmthFrom, number[]>>;
  /** Per rung, the P90's margin (rung-spread.ts), moved by each start scored against the P90 published before it; absent: 0. */
  p90Margin?: Partial<Record<WarmthFrom, number>>;
  /** MiB in use on the shard's GPUs at READY, oldest first (the last WARMTH_MEDIAN_SAMPLES); absent in files of older agents. */
  gpuMib?: number[];
  /** The GPUs the last of those was summed over. */
  gpus?: number;
}

interface WarmthFile {
  version: 1;
  entries: Entry[];
  /** The node's last measured transfer rates (modelled-warmth.ts); absent in files of older agents. */
  rates?: NodeRates;
}

/**
 * How long the time to READY waits to be told for the GPU memory read
 * after it. Told one after the other, each READY asked for two Inventories
 * of the whole node, a burst of 64 engines 82-128, and READY statuses
 * queued behind them (bench 16, branch ready7). The read answers in
 * milliseconds to a few hundred on a loaded host; one that hangs (nvidia-smi
 * is killed after discovery.timeout, 10 s) delays the time no longer than this.
 */
export const MEMORY_TELL_WAIT_MS = 1000;

const FROM: readonly WarmthFrom[] = ['sleeping-l1', 'sleeping-l2', 'page-cache+compile', 'page-cache', 'store+compile', 'store', 'hub', 'unmanaged'];

const keyOf = (s: { spec: ShardSnapshot['spec'] }) => {
  const p = s.spec.profile;
  return { model: p?.model ?? '', engine: p?.engine ?? '', profile: p?.name ?? '' };
};
const idOf = (k: { model: string; engine: string; profile: string }) => JSON.stringify([k.model, k.engine, k.profile]);

export interface WarmthLedgerOptions {
  /** The file it is kept in (<state_dir>/warmth.json). */
  path: string;
  /** Whether the agent has a model store (models.cache_dir): a start is then from the store or the hub. */
  hasStore: boolean;
  logger: Logger;
  /**
   * Told after each measurement, so the next Inventory carries it: at READY
   * once, when the GPU memory read after the time has answered (or failed),
   * or MEMORY_TELL_WAIT_MS after the time if it has not; again when a read
   * that slow learns the memory.
   */
  onLearned?: () => void;
  /** The store's models as its last scan saw them (Inventory.cached_models): what a start is from, and the rung now. */
  cached?: () => readonly CachedModel[];
  /** Whether a start of this profile would find the compile cache a READY start of it used (compile-claims.ts); none: never. */
  compiled?: (model: string, engine: string, profile: string) => boolean;
  /**
   * MiB in use now on GPUs `gpus`, summed, read fresh (the GPU memory
   * sampler's readNow); undefined when it cannot say. None: GPU memory at
   * READY is never learned.
   */
  gpuMemoryMib?: (gpus: readonly number[]) => Promise<number | undefined>;
}

export class WarmthLedger {
  readonly #opts: WarmthLedgerOptions;
  readonly #entries = new Map<string, Entry>();
  /** Per shard, a start or wake under way: where it came from and when. */
  readonly #pending = new Map<string, { from: WarmthFrom; atMs: number }>();
  #rates: NodeRates = {};
  readonly #writes: SerialWrites;

  constructor(opts: WarmthLedgerOptions) {
    this.#opts = opts;
    this.#writes = new SerialWrites((err) => opts.logger.warn({ file: opts.path, err: errorMessage(err) }, 'could not keep the times to READY on disk'));
    this.#load();
  }

  /** A shard's transition: a launch begins a measurement, READY ends it, any other end forgets it. */
  follow(t: ShardTransition): void {
    const id = t.shard.shardId;
    if (t.to === ShardState.STARTING) {
      // An adopted engine was launched by another agent: when, and from what, nobody here knows.
      if (t.shard.adopted) this.#pending.delete(id);
      else this.#pending.set(id, { from: this.#startFrom(t.shard), atMs: t.shard.startedAtMs });
      return;
    }
    const pending = this.#pending.get(id);
    if (pending && isWarmedUp(t.from, t.to)) {
      this.#pending.delete(id);
      const readsMemory = this.#opts.gpuMemoryMib !== undefined && t.shard.spec.gpuIndices.length > 0;
      this.#record(t.shard, pending.from, Date.now() - pending.atMs, !readsMemory);
      if (readsMemory) void this.#learnMemory(t.shard);
      return;
    }
    if (isLeaving(t.to)) this.#pending.delete(id);
  }

  /** A pull fetched `bytes` from the hub, or a warm read them from disk, in `ms`: what modelled times are made from. */
  learnRate(kind: keyof NodeRates, bytes: number, ms: number): void {
    if (bytes < MIN_RATE_BYTES || ms <= 0) return;
    this.#rates = { ...this.#rates, [kind]: { bytes, ms: Math.round(ms), atMs: Date.now() } };
    this.#opts.logger.info({ kind, bytes, ms: Math.round(ms), bytesPerS: Math.round((bytes * 1000) / ms) }, 'transfer rate measured');
    this.#save();
  }

  /** A WakeShard is being carried out for `shard`: READY ends the measurement, from its sleep's level. */
  wakeAsked(shard: ShardSnapshot): void {
    this.#pending.set(shard.shardId, { from: shard.sleepLevel === 2 ? 'sleeping-l2' : 'sleeping-l1', atMs: Date.now() });
  }

  /** Every rate the node measured (Inventory.rates). */
  rates(): NodeRates {
    return this.#rates;
  }

  /** The node's last measured disk rate (learnRate('disk', …)): what a level-2 wake's deadline is derived from (wake-deadline.ts). */
  diskRate(): NodeRates['disk'] {
    return this.#rates.disk;
  }

  /**
   * What Inventory.warmth says: per model, engine and profile measured, the
   * rung the node offers now (from its shards and its store) and what it learned.
   */
  report(shards: readonly ShardSnapshot[], cached: readonly CachedModel[]): ModelWarmth[] {
    // The map is kept in the order of measurement: the most recent first here.
    return [...this.#entries.values()]
      .reverse()
      .map((e) =>
        create(ModelWarmthSchema, {
          model: e.model,
          engine: e.engine,
          profile: e.profile,
          rung: this.#rungNow(e, shards, cached),
          learned: this.#learned(e, cached),
          gpuMemoryAtReadyMib: e.gpuMib && e.gpuMib.length > 0 ? Math.round(median(e.gpuMib)) : 0,
          gpuMemoryAtReadyGpus: e.gpuMib && e.gpuMib.length > 0 ? (e.gpus ?? 0) : 0,
        }),
      );
  }

  /** What was measured of an entry, then what is modelled for rungs it never came from (modelled-warmth.ts). */
  #learned(e: Entry, cached: readonly CachedModel[]): TimeToReady[] {
    const measured = FROM.flatMap((from) => {
      const s = e.samples[from];
      if (!s || s.length === 0) return [];
      const spread = rungSpread(s, e.p90Margin?.[from] ?? 0);
      return [create(TimeToReadySchema, { from, medianSeconds: median(s.slice(-WARMTH_MEDIAN_SAMPLES)) / 1000, samples: s.length, p50Seconds: spread.p50Ms / 1000, p90Seconds: spread.p90Ms / 1000 })];
    });
    const bytes = Number(cached.find((c) => c.repo === e.model && c.complete)?.bytes ?? 0n);
    return [...measured, ...modelledTimes(measured, bytes, this.#rates)];
  }

  /** Resolves once every measurement so far is on disk. */
  flushed(): Promise<void> {
    return this.#writes.settled();
  }

  /** No write starts after this (the agent is going away: what is measured next stays in memory); resolves once the last one asked has ended. */
  close(): Promise<void> {
    return this.#writes.close();
  }

  #startFrom(s: ShardSnapshot): WarmthFrom {
    if (!this.#opts.hasStore) return 'unmanaged';
    // The admission's note says when a start runs online, and why (start-admission.ts onlineNote).
    if (s.note?.startsWith('started online')) return 'hub';
    const k = keyOf(s);
    const base = inPageCache(k.model, this.#opts.cached?.() ?? []) ? 'page-cache' : 'store';
    return this.#opts.compiled?.(k.model, k.engine, k.profile) ? `${base}+compile` : base;
  }

  #rungNow(e: Entry, shards: readonly ShardSnapshot[], cached: readonly CachedModel[]): string {
    const mine = shards.filter((s) => idOf(keyOf(s)) === idOf(e));
    if (mine.some((s) => s.state === ShardState.READY)) return 'serving';
    // A level-1 wake copies the weights back from host RAM, a level-2 one reloads them from disk: two rungs (issue 51).
    const asleep = mine.find((s) => s.state === ShardState.SLEEPING);
    if (asleep) return asleep.sleepLevel === 2 ? 'sleeping-l2' : 'sleeping-l1';
    if (!this.#opts.hasStore) return 'unmanaged';
    const inStore = cached.filter((c) => c.repo === e.model);
    const compile = this.#opts.compiled?.(e.model, e.engine, e.profile) ? '+compile' : '';
    if (inPageCache(e.model, cached)) return `page-cache${compile}`;
    if (inStore.some((c) => c.complete)) return `store${compile}`;
    return inStore.length > 0 ? 'partial' : 'absent';
  }

  /** Records a time to READY; `tell`: onLearned now (not when a memory read follows, which tells for both). */
  #record(shard: ShardSnapshot, from: WarmthFrom, ms: number, tell = true): void {
    const k = keyOf(shard);
    const id = idOf(k);
    const e = this.#entries.get(id) ?? { ...k, updatedAtMs: 0, samples: {} };
    const before = e.samples[from] ?? [];
    const took = Math.max(0, Math.round(ms));
    // Scored against the P90 Inventory carried before it: the margin learns how often that promise held.
    const p90Before = before.length > 0 ? rungSpread(before, e.p90Margin?.[from] ?? 0).p90Ms : undefined;
    if (p90Before !== undefined) e.p90Margin = { ...e.p90Margin, [from]: nextP90Margin(e.p90Margin?.[from] ?? 0, took > p90Before) };
    const samples = [...before, took].slice(-WARMTH_SAMPLES);
    e.samples[from] = samples;
    e.updatedAtMs = Date.now();
    this.#entries.delete(id);
    this.#entries.set(id, e);
    while (this.#entries.size > WARMTH_MODELS) this.#entries.delete(this.#entries.keys().next().value as string);
    this.#opts.logger.info(
      { shard: shard.shardId, model: k.model, engine: k.engine, profile: k.profile, from, ms: took, median: median(samples.slice(-WARMTH_MEDIAN_SAMPLES)), ...(p90Before !== undefined ? { p90Before, overP90: took > p90Before } : {}) },
      'time to READY measured',
    );
    this.#save();
    if (tell) this.#opts.onLearned?.();
  }

  /**
   * The GPU memory the shard holds now it is READY, beside its time: read
   * after the time is recorded, so a slow nvidia-smi never skews the time,
   * and the next Inventory carries both (MEMORY_TELL_WAIT_MS). A reading
   * that fails (nvidia-smi gone, no GPU of the shard in it) learns nothing.
   */
  async #learnMemory(shard: ShardSnapshot): Promise<void> {
    const gpus = shard.spec.gpuIndices;
    const read = this.#opts.gpuMemoryMib as NonNullable<WarmthLedgerOptions['gpuMemoryMib']>;
    // The time is told with the memory, or alone once the read is late.
    let told = false;
    const tellTime = () => {
      if (told) return;
      told = true;
      this.#opts.onLearned?.();
    };
    const late = setTimeout(tellTime, MEMORY_TELL_WAIT_MS);
    late.unref?.();
    const mib = await read(gpus)
      .catch(() => undefined)
      .finally(() => clearTimeout(late));
    const e = this.#entries.get(idOf(keyOf(shard)));
    if (mib === undefined || !Number.isFinite(mib) || mib < 0 || !e) {
      tellTime();
      return;
    }
    e.gpuMib = [...(e.gpuMib ?? []), Math.round(mib)].slice(-WARMTH_MEDIAN_SAMPLES);
    e.gpus = gpus.length;
    this.#opts.logger.info({ shard: shard.shardId, model: e.model, engine: e.engine, profile: e.profile, gpus: gpus.length, mib: Math.round(mib) }, 'GPU memory at READY measured');
    this.#save();
    this.#opts.onLearned?.();
  }

  /** Reads what an earlier agent measured; a file that cannot be read starts the ledger empty, and says why. */
  #load(): void {
    let text: string;
    try {
      text = readFileSync(this.#opts.path, 'utf8');
    } catch {
      return;
    }
    try {
      const f = JSON.parse(text) as WarmthFile;
      if (f.version !== 1 || !Array.isArray(f.entries)) throw new Error('not a version 1 warmth file');
      for (const kind of ['hub', 'disk', 'diskWrite'] as const) {
        const r = f.rates?.[kind];
        if (r && Number.isFinite(r.bytes) && Number.isFinite(r.ms) && r.bytes >= MIN_RATE_BYTES && r.ms > 0) this.#rates[kind] = { bytes: r.bytes, ms: r.ms, atMs: Number(r.atMs) || 0 };
      }
      for (const e of f.entries.slice(-WARMTH_MODELS)) {
        if (typeof e.model !== 'string' || typeof e.engine !== 'string' || typeof e.profile !== 'string' || typeof e.samples !== 'object' || e.samples === null) continue;
        const samples: Entry['samples'] = {};
        for (const from of FROM) {
          const s = e.samples[from];
          if (Array.isArray(s)) samples[from] = s.filter((n) => Number.isFinite(n) && n >= 0).slice(-WARMTH_SAMPLES);
        }
        const gpuMib = Array.isArray(e.gpuMib) ? e.gpuMib.filter((n) => Number.isFinite(n) && n >= 0).slice(-WARMTH_MEDIAN_SAMPLES) : undefined;
        const gpus = Number.isInteger(e.gpus) && (e.gpus as number) > 0 ? e.gpus : undefined;
        const p90Margin: Entry['p90Margin'] = {};
        for (const from of FROM) {
          const m = e.p90Margin?.[from];
          if (typeof m === 'number' && Number.isFinite(m) && m >= 0) p90Margin[from] = m;
        }
        this.#entries.set(idOf(e), { model: e.model, engine: e.engine, profile: e.profile, updatedAtMs: Number(e.updatedAtMs) || 0, samples, p90Margin, ...(gpuMib && gpus ? { gpuMib, gpus } : {}) });
      }
    } catch (err) {
      this.#opts.logger.warn({ file: this.#opts.path, err: errorMessage(err) }, 'ignoring the warmth file: times to READY are measured anew');
    }
  }

  /** Written aside and renamed, one write at a time: a crash leaves the old file or the new one. */
  #save(): void {
    const f: WarmthFile = { version: 1, entries: [...this.#entries.values()], rates: this.#rates };
    const tmp = `${this.#opts.path}.tmp`;
    void this.#writes.queue(async () => {
      await writeFile(tmp, `${JSON.stringify(f)}\n`, { mode: 0o600 });
      await rename(tmp, this.#opts.path);
    });
  }
}

/**
 * Whether the store holds `model` complete with at least PAGE_CACHE_SHARE of
 * what its loader reads (load_bytes; the whole model from an older scan) in
 * the page cache at its last scan.
 */
function inPageCache(model: string, cached: readonly CachedModel[]): boolean {
  return cached.some((c) => {
    const of = c.loadBytes > 0n ? c.loadBytes : c.bytes;
    return c.repo === model && c.complete && of > 0n && Number(c.residentBytes) >= PAGE_CACHE_SHARE * Number(of);
  });
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}
