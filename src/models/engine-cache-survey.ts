import { constants } from 'node:fs';
import { type FileHandle, lstat, open, opendir, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { StoreLayout } from './store-layout.js';

/**
 * Where each engine keeps what it compiled, under its cache for a model
 * (engineCacheEnv), by the engine's name: its wing says (EngineKind.compileDirs,
 * src/agent/engines/<name>/), and the store, which knows no engine, is told.
 * An engine not listed compiled nothing the survey counts.
 */
export type CompileDirs = Readonly<Record<string, readonly string[]>>;

/**
 * The file each engine writes into a compile-cache folder once a compile
 * with caching on is over, and reads back at the next start: vLLM's
 * CompilerManager.save_to_file (V:vllm/compilation/backends.py:183, 215-221,
 * skipped when the cache is disabled), SGLang's (S:…/compilation/backend.py:93, 103-109).
 * cache_key_factors.json and computation_graph.py are written at every
 * compile, caching on or off (V:…/backends.py:1114-1134, 1258-1270), so
 * they prove nothing (review engine-fidelity-3 E10).
 */
export const COMPILE_CACHE_FILES = ['vllm_compile_cache.py', 'sglang_compile_cache.py'] as const;

/** What one survey may cost, whatever the engine accounts put in their folders. */
export interface SurveyLimits {
  /** Entries read from one leaf (an account's cache for one engine and model), at most. */
  entriesPerLeaf: number;
  /** Entries read in all, at most. */
  entries: number;
  /** Folders below a leaf, at most (torch's caches are 3-4 deep). */
  depth: number;
  /** Time the survey may take; what is left is not read. */
  ms: number;
}

/** A compile cache is a few hundred to a few thousand files; a flood of 400,000 links costs no more than this. */
export const SURVEY_LIMITS: SurveyLimits = { entriesPerLeaf: 5_000, entries: 40_000, depth: 8, ms: 5_000 };

/**
 * The part of models.budget the engines' caches may take, together (F4): what
 * they hold beyond it is reported and not counted, so an engine account can
 * never make a pull evict more than this share of the other tenants' models.
 */
export const ENGINE_CACHE_SHARE = 0.25;

export interface LeafSurvey {
  uid: number;
  engine: string;
  /** The model's cache folder name (StoreLayout.engineCacheDir's last part). */
  leaf: string;
  /** Allocated bytes (st_blocks × 512) of the regular files read: a sparse file counts what it takes on disk. */
  bytes: number;
  /** A regular file under one of its engine's CompileDirs. */
  compiled: boolean;
  /** Folders (relative to the leaf) holding a COMPILE_CACHE_FILES file, with its mtime: the caches a start can reuse. */
  cacheDirs: { dir: string; mtimeMs: number }[];
  entries: number;
  /** The leaf had more than the survey reads (entries, depth or time): its bytes are a floor. */
  capped: boolean;
}

export interface EngineCacheSurvey {
  leaves: LeafSurvey[];
  /** Allocated bytes of every leaf read. */
  bytes: number;
  entries: number;
  /** Links met and not followed. */
  links: number;
  /** Some leaf (or the survey) was cut short by a limit. */
  capped: boolean;
  atMs: number;
  ms: number;
}

/**
 * Reads the engine accounts' caches under `<cache_dir>/engines` (security
 * review 4, F2 and F4) as root without being steered by what the accounts put
 * there:
 *
 * - bounded: at most `entriesPerLeaf` entries of one leaf, `entries` in all,
 *   `depth` folders deep and `ms` of time, read a few dozen at a time
 *   (opendir, never a whole folder at once), all of it asynchronous, off
 *   the event loop's hot paths (EngineCacheWatch keeps the last survey);
 * - never through a link: each folder is opened O_NOFOLLOW|O_DIRECTORY and
 *   held, and what is in it is reached through `/proc/self/fd/<fd>/<name>`
 *   (openat's semantics: the held folder, whatever its path leads to by
 *   now), lstat'ed, never followed, so a folder swapped for a link between
 *   its listing and its reading is refused (ELOOP), not walked;
 * - by allocated blocks, not apparent size: a 15 TiB sparse file is 0.
 *
 * The folders above the leaves are root's (store-trust.ts); the leaves and
 * all below them the accounts'.
 */
export async function surveyEngineCaches(layout: StoreLayout, limits: SurveyLimits = SURVEY_LIMITS, compileDirs: CompileDirs = {}): Promise<EngineCacheSurvey> {
  const started = Date.now();
  const deadline = started + limits.ms;
  const s: EngineCacheSurvey = { leaves: [], bytes: 0, entries: 0, links: 0, capped: false, atMs: started, ms: 0 };
  const spent = () => s.entries >= limits.entries || Date.now() >= deadline;
  for (const uid of (await readdir(layout.engineCachesDir).catch(() => [] as string[])).filter((u) => /^\d+$/.test(u)).sort()) {
    const uidDir = join(layout.engineCachesDir, uid);
    for (const engine of (await readdir(uidDir).catch(() => [] as string[])).sort()) {
      const engineDir = join(uidDir, engine);
      for (const leaf of (await readdir(engineDir).catch(() => [] as string[])).sort()) {
        const l: LeafSurvey = { uid: Number(uid), engine, leaf, bytes: 0, compiled: false, cacheDirs: [], entries: 0, capped: false };
        if (spent()) {
          l.capped = true;
        } else {
          const fh = await openFolder(join(engineDir, leaf));
          if (fh === undefined) continue; // a link, a file or gone: nothing of the account's is read through it
          try {
            await walkFolder(fh, '', 0, l, s, limits, spent, compileDirs[engine] ?? []);
          } finally {
            await fh.close();
          }
        }
        s.bytes += l.bytes;
        s.capped ||= l.capped;
        s.leaves.push(l);
      }
    }
  }
  s.ms = Date.now() - started;
  return s;
}

/** The bytes of the engines' caches that count against `budget`: their allocated bytes up to ENGINE_CACHE_SHARE of it, the whole share when the survey could not read them all. */
export function countedEngineCacheBytes(s: EngineCacheSurvey, budget: number): number {
  const share = Math.floor(budget * ENGINE_CACHE_SHARE);
  return s.capped ? share : Math.min(s.bytes, share);
}

/** Whether the engines' caches are over their bound (their share of the budget, or more than a survey reads). */
export function engineCachesOverBound(s: EngineCacheSurvey, budget: number): boolean {
  return s.capped || s.bytes > Math.floor(budget * ENGINE_CACHE_SHARE);
}

async function openFolder(path: string): Promise<FileHandle | undefined> {
  try {
    return await open(path, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch {
    return undefined;
  }
}

async function walkFolder(fh: FileHandle, rel: string, depth: number, l: LeafSurvey, s: EngineCacheSurvey, limits: SurveyLimits, spent: () => boolean, compileDirs: readonly string[]): Promise<void> {
  const here = `/proc/self/fd/${fh.fd}`;
  const dir = await opendir(here, { bufferSize: 32 }).catch(() => undefined);
  if (dir === undefined) return;
  const inCompile = compileDirs.some((d) => rel === d || rel.startsWith(`${d}/`));
  try {
    for (;;) {
      if (l.entries >= limits.entriesPerLeaf || spent()) {
        l.capped = true;
        return;
      }
      const e = await dir.read();
      if (e === null) return;
      l.entries++;
      s.entries++;
      if (e.isSymbolicLink()) {
        s.links++;
        continue;
      }
      const child = `${here}/${e.name}`;
      const isDir = e.isDirectory();
      if (!isDir) {
        // A file, or a type the folder did not say (DT_UNKNOWN): lstat, never stat.
        const st = await lstat(child).catch(() => undefined);
        if (st === undefined) continue;
        if (st.isFile()) {
          l.bytes += st.blocks * 512;
          if (inCompile) l.compiled = true;
          if (inCompile && (COMPILE_CACHE_FILES as readonly string[]).includes(e.name)) l.cacheDirs.push({ dir: rel, mtimeMs: st.mtimeMs });
          continue;
        }
        if (!st.isDirectory()) {
          if (st.isSymbolicLink()) s.links++;
          continue;
        }
      }
      if (depth >= limits.depth) {
        l.capped = true;
        continue;
      }
      const sub = await openFolder(child);
      if (sub === undefined) continue;
      try {
        await walkFolder(sub, rel === '' ? e.name : `${rel}/${e.name}`, depth + 1, l, s, limits, spent, compileDirs);
      } finally {
        await sub.close();
      }
    }
  } finally {
    await dir.close().catch(() => {});
  }
}
