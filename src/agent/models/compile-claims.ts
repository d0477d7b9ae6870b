import { readFileSync } from 'node:fs';
import { open, rename, writeFile } from 'node:fs/promises';
import { relative, sep } from 'node:path';
import { errorMessage } from '../../lib/errors.js';
import { SerialWrites } from '../../lib/files/serial-writes.js';
import type { Logger } from '../../lib/logger.js';
import { engineKindOf } from '../engines/engine-catalog.js';
import type { EngineCacheWatch } from '../../models/engine-cache-watch.js';
import type { StoreLayout } from '../../models/store-layout.js';

/*
 * `+compile` earned, never assumed (issue 51, review engine-fidelity-3 E10).
 * A rung says "+compile" for a profile only while the compile-cache folder
 * a READY start of that very profile was seen to use is still there, under
 * the account the next start runs as, holding the file the engine reads
 * back (COMPILE_CACHE_FILES). Before, any file under any account's compile
 * folders of the model counted: vLLM writes cache_key_factors.json at every
 * compile with caching off too, its folder is keyed by the profile (model
 * path, max-model-len, TP/PP, sleep mode), revision and versions
 * (V:vllm/compilation/backends.py:1030-1079), and any Triton kernel made
 * every SGLang start read "+compile".
 *
 * How a start's folder is seen:
 * - vLLM names it: "Using cache directory: <dir> for vLLM's torch.compile",
 *   or "vLLM's torch.compile cache is disabled." (V:…/backends.py:1091-1097);
 *   the last of the two in the shard's log decides.
 * - SGLang names none (its hash is the compiler's alone,
 *   S:python/sglang/srt/compilation/backend.py:404-418): the folder whose
 *   sglang_compile_cache.py this start wrote (mtime at or after its launch).
 *   A start that loaded a cache writes nothing, and the folder an earlier
 *   start of the profile was seen to write stays claimed while it is there.
 */

/** What one profile's READY start was seen to use. */
interface Claim {
  model: string;
  engine: string;
  profile: string;
  uid: number;
  /** The folder, relative to the account's cache for the engine and model (StoreLayout.engineCacheDir). */
  dir: string;
  atMs: number;
}

/** Claims kept, the most recent: one per profile seen. */
export const COMPILE_CLAIMS_MAX = 256;
/** The tail of a shard's log read for vLLM's line: its start-up is at the end of it at READY. */
const LOG_TAIL_BYTES = 4 * 1024 * 1024;

const USING = /Using cache directory: (.+?) for vLLM's torch\.compile/;
const DISABLED = /vLLM's torch\.compile cache is disabled/;

export interface CompileClaimsOptions {
  /** <state_dir>/compile-claims.json */
  path: string;
  layout: StoreLayout;
  caches: EngineCacheWatch;
  /** The uid the next start of `engine` runs as (engines.<name>.user, else the agent's). */
  uidOf: (engine: string) => number;
  logger: Logger;
  /** Told after a claim is made or forgotten, so the next Inventory carries the rung. */
  onChange?: () => void;
}

/** The shard as a claim needs it. */
export interface SeenStart {
  shardId: string;
  engine: string;
  model: string;
  profile: string;
  logPath: string;
  startedAtMs: number;
}

const idOf = (c: Pick<Claim, 'model' | 'engine' | 'profile'>) => JSON.stringify([c.model, c.engine, c.profile]);

export class CompileClaims {
  readonly #claims = new Map<string, Claim>();
  readonly #writes: SerialWrites;

  constructor(private readonly opts: CompileClaimsOptions) {
    this.#writes = new SerialWrites((err) => opts.logger.warn({ file: opts.path, err: errorMessage(err) }, 'could not keep the compile-cache claims on disk'));
    this.#load();
  }

  /** Whether a start of this profile now would find the compile cache a READY start of it used. Never waits, never reads a folder. */
  claimed(model: string, engine: string, profile: string): boolean {
    const c = this.#claims.get(idOf({ model, engine, profile }));
    if (c === undefined || c.uid !== this.opts.uidOf(engine)) return false;
    return this.opts.caches.cacheDirs(c.uid, engine, model).some((d) => d.dir === c.dir);
  }

  /**
   * A start of `s` reached READY: which compile-cache folder it used, read
   * from its log (vLLM) or from the survey taken now (SGLang). A start seen
   * with caching off forgets the profile's claim.
   */
  async seen(s: SeenStart): Promise<void> {
    const how = engineKindOf(s.engine)?.compileInUse;
    if (how === undefined) return;
    const uid = this.opts.uidOf(s.engine);
    const leafDir = this.opts.layout.engineCacheDir(uid, s.engine, s.model);
    try {
      await this.opts.caches.refresh();
      const dirs = this.opts.caches.cacheDirs(uid, s.engine, s.model);
      let dir: string | undefined;
      if (how === 'said-in-log') {
        const said = await lastCacheLine(s.logPath);
        if (said === 'disabled') {
          this.#forget(s);
          return;
        }
        const rel = said === undefined ? undefined : relative(leafDir, said);
        if (rel !== undefined && !rel.startsWith('..') && !rel.startsWith(sep) && dirs.some((d) => d.dir === rel)) dir = rel;
      } else {
        dir = dirs.filter((d) => d.mtimeMs >= s.startedAtMs - 1000).sort((a, b) => b.mtimeMs - a.mtimeMs)[0]?.dir;
      }
      if (dir === undefined) return;
      const claim: Claim = { model: s.model, engine: s.engine, profile: s.profile, uid, dir, atMs: Date.now() };
      const id = idOf(claim);
      this.#claims.delete(id);
      this.#claims.set(id, claim);
      while (this.#claims.size > COMPILE_CLAIMS_MAX) this.#claims.delete(this.#claims.keys().next().value as string);
      this.opts.logger.info({ shard: s.shardId, model: s.model, engine: s.engine, profile: s.profile, uid, dir }, 'compile cache seen in use');
      this.#save();
      this.opts.onChange?.();
    } catch (err) {
      this.opts.logger.warn({ shard: s.shardId, err: errorMessage(err) }, 'could not tell which compile cache the start used; no +compile is claimed for it');
    }
  }

  /** Resolves once every claim so far is on disk. */
  flushed(): Promise<void> {
    return this.#writes.settled();
  }

  /** No write starts after this (the agent is going away: a claim made next stays in memory); resolves once the last one asked has ended. */
  close(): Promise<void> {
    return this.#writes.close();
  }

  #forget(s: SeenStart): void {
    if (!this.#claims.delete(idOf(s))) return;
    this.#save();
    this.opts.onChange?.();
  }

  #load(): void {
    try {
      const f = JSON.parse(readFileSync(this.opts.path, 'utf8')) as { version?: number; claims?: Claim[] };
      if (f.version !== 1 || !Array.isArray(f.claims)) return;
      for (const c of f.claims.slice(-COMPILE_CLAIMS_MAX)) {
        if ([c.model, c.engine, c.profile, c.dir].every((x) => typeof x === 'string') && Number.isInteger(c.uid)) this.#claims.set(idOf(c), c);
      }
    } catch {
      // None yet, or unreadable: no compile cache is claimed until a start is seen using one.
    }
  }

  #save(): void {
    const text = `${JSON.stringify({ version: 1, claims: [...this.#claims.values()] })}\n`;
    const tmp = `${this.opts.path}.tmp`;
    void this.#writes.queue(async () => {
      await writeFile(tmp, text, { mode: 0o600 });
      await rename(tmp, this.opts.path);
    });
  }
}

/** The folder of the last "Using cache directory" line in the log's tail, 'disabled' when the cache-off line came last, undefined when neither. */
export async function lastCacheLine(logPath: string): Promise<string | 'disabled' | undefined> {
  const fh = await open(logPath, 'r');
  let text: string;
  try {
    const { size } = await fh.stat();
    const len = Math.min(size, LOG_TAIL_BYTES);
    const buf = Buffer.alloc(len);
    await fh.read(buf, 0, len, size - len);
    text = buf.toString('utf8');
  } finally {
    await fh.close();
  }
  const lines = text.split('\n');
  for (let i = lines.length - 1; i >= 0; i--) {
    const line = lines[i] as string;
    if (DISABLED.test(line)) return 'disabled';
    const m = USING.exec(line);
    if (m) return m[1];
  }
  return undefined;
}
