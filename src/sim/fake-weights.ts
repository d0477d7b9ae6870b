/**
 * The vLLM double's weights and compile cache, for warm starts (issue 30):
 * a start whose cost depends on the node's caches as a real engine's does.
 *
 * With --sim-read-weights the double reads the files of its model's
 * snapshot its engine's loader would (src/models/loader-files.ts: indexed
 * safetensors, not original/ nor .bin twins), byte for byte, as vLLM does
 * through huggingface_hub (HF_HUB_CACHE, else $HF_HOME/hub, else
 * ~/.cache/huggingface/hub; the revision from refs/<name>, a commit as
 * itself). Offline it never downloads: a snapshot that is not there fails
 * the start. Online with HF_ENDPOINT it fetches the files its loader reads
 * that the cache lacks, and only those (fetchMissing).
 * Offline (HF_HUB_OFFLINE=1) it also needs what vLLM's tokenizer reads
 * from a local snapshot: a vocabulary (holdsTokenizer in
 * src/models/loader-files.ts, whose comment cites transformers; its
 * tokenizer_config.json is optional), in the --tokenizer repo's snapshot when one is given
 * (which must itself be cached: V:vllm/engine/arg_utils.py:809-832,
 * V:vllm/transformers_utils/repo_utils.py:279-297), else in the model's
 * (readWeights' `tokenizer` option, from the doubles' --tokenizer and
 * --tokenizer-path). Online it fetches the tokenizer repo's files the cache
 * lacks, and a draft model's (--speculative-config's "model", SGLang's
 * --speculative-draft-model-path) as its model's: each engine resolves
 * those repos through the same hub cache (src/models/feed-start-repos.ts
 * cites the lines).
 *
 * With --sim-compile-time it compiles as fake-compile-cache.ts says.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdir, open, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { isNotFound } from '../lib/errno.js';
import { filesLoaderReads, holdsTokenizer, MISTRAL_INDEX, SAFE_WEIGHTS_INDEX, weightMapFiles } from '../models/loader-files.js';

/** Bytes read at a time: large reads, as safetensors loading does with mmap. */
const READ_CHUNK_BYTES = 8 * 1024 * 1024;

/** Weight files, which a tokenizer's load never asks for. */
const WEIGHTS = /\.(safetensors|bin|pt|pth|gguf)$/;

/** A commit named as the revision is the snapshot's folder itself. */
const COMMIT = /^[0-9a-f]{40}$/;

export interface WeightsRead {
  snapshotDir: string;
  commit: string;
  files: number;
  bytes: number;
  /** sha256 of the bytes read, file after file in path order: what the double's answers derive from (issue 51). */
  digest: string;
}

/** The start cannot have its weights; the message is the engine's last line before it exits 1. */
export class MissingWeightsError extends Error {}

/** huggingface_hub's _is_true: "1", "ON", "YES", "TRUE" in any case. */
export function hubOffline(env: NodeJS.ProcessEnv): boolean {
  return ['1', 'ON', 'YES', 'TRUE'].includes((env.HF_HUB_OFFLINE ?? '').toUpperCase());
}

/** huggingface_hub's constants.HF_HUB_CACHE. */
export function hubCacheDir(env: NodeJS.ProcessEnv): string {
  if (env.HF_HUB_CACHE) return env.HF_HUB_CACHE;
  const hfHome = env.HF_HOME || join(env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'huggingface');
  return join(hfHome, 'hub');
}

/** The snapshot of `repo` at `revision` in the hub cache; throws MissingWeightsError naming what is absent. */
export async function findSnapshot(repo: string, revision: string, env: NodeJS.ProcessEnv): Promise<{ dir: string; commit: string }> {
  const repoDir = join(hubCacheDir(env), `models--${repo.replaceAll('/', '--')}`);
  const missing = (what: string) =>
    new MissingWeightsError(
      hubOffline(env)
        ? `LocalEntryNotFoundError: cannot find an appropriate cached snapshot folder for ${repo} at revision ${revision} on the local disk (${what}) and outgoing traffic has been disabled (HF_HUB_OFFLINE=${env.HF_HUB_OFFLINE})`
        : `no cached snapshot of ${repo} at revision ${revision} (${what}), and no HF_ENDPOINT for the double to download it from (--sim-read-weights): pull it into the store first (llmgw models pull ${repo})`,
    );
  let commit = revision;
  if (!COMMIT.test(revision)) {
    try {
      commit = (await readFile(join(repoDir, 'refs', ...revision.split('/')), 'utf8')).trim();
    } catch (err) {
      if (isNotFound(err)) throw missing(`no ${join(repoDir, 'refs', revision)}`);
      throw err;
    }
  }
  const dir = join(repoDir, 'snapshots', commit);
  try {
    if (!(await stat(dir)).isDirectory()) throw missing(`${dir} is not a folder`);
  } catch (err) {
    if (isNotFound(err)) throw missing(`no ${dir}`);
    throw err;
  }
  return { dir, commit };
}

/** Every file under `dir`, following the snapshot's symlinks to their blobs. */
async function snapshotFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, e.name);
    if (e.isDirectory()) out.push(...(await snapshotFiles(path)));
    else out.push(path);
  }
  return out.sort();
}

/**
 * Reads every byte of the snapshot of `repo` at `revision`. `cancelled` is
 * asked between reads, so a SIGTERM while loading ends the read. A link
 * whose blob is gone fails the start as a half-removed model would.
 */
export async function readWeights(
  repo: string,
  revision: string,
  env: NodeJS.ProcessEnv,
  cancelled: () => boolean = () => false,
  opts: { tokenizer?: { repo: string; revision: string }; draft?: { repo: string; revision: string }; engine?: string; loadFormat?: string } = {},
): Promise<WeightsRead> {
  // Online, vLLM asks the hub for the revision's files and fetches those its loader reads that the cache lacks; the double does too, from HF_ENDPOINT.
  if (!hubOffline(env) && env.HF_ENDPOINT) {
    await fetchMissing(repo, revision, env, env.HF_ENDPOINT, { engine: opts.engine ?? 'vllm', ...(opts.loadFormat ? { loadFormat: opts.loadFormat } : {}) });
    // transformers' AutoTokenizer asks for the tokenizer's files only, never weights.
    if (opts.tokenizer) await fetchMissing(opts.tokenizer.repo, opts.tokenizer.revision, env, env.HF_ENDPOINT, { engine: opts.engine ?? 'vllm' }, { tokenizerOnly: true });
  }
  // The draft is a model of its own (fetched and read as one); its bytes are read, its digest is not the served answer's.
  const draft = opts.draft ? await readWeights(opts.draft.repo, opts.draft.revision, env, cancelled, { engine: opts.engine ?? 'vllm' }) : undefined;
  const { dir, commit } = await findSnapshot(repo, revision, env);
  // Only what the engine's loader reads (src/models/loader-files.ts, with its source lines): indexed
  // safetensors, never original/ nor a .bin twin (review engine-fidelity-3 E11/E12).
  const all = (await snapshotFiles(dir)).map((p) => relative(dir, p));
  const readIndex = (name: string) => {
    try {
      return weightMapFiles(readFileSync(join(dir, name), 'utf8'));
    } catch {
      return undefined;
    }
  };
  const files = filesLoaderReads(all, readIndex, { engine: opts.engine ?? 'vllm', ...(opts.loadFormat ? { loadFormat: opts.loadFormat } : {}) }).map((p) => join(dir, ...p.split('/')));
  if (files.length === 0) throw new MissingWeightsError(`the cached snapshot ${dir} of ${repo} holds no file`);
  if (hubOffline(env)) {
    const tokenizerDir = opts.tokenizer ? (await findSnapshot(opts.tokenizer.repo, opts.tokenizer.revision, env)).dir : dir;
    await requireTokenizerFiles(tokenizerDir);
  }
  const buf = Buffer.allocUnsafe(READ_CHUNK_BYTES);
  const hash = createHash('sha256');
  let bytes = 0;
  for (const path of files) {
    let fh: Awaited<ReturnType<typeof open>>;
    try {
      fh = await open(path, 'r');
    } catch (err) {
      if (isNotFound(err)) throw new MissingWeightsError(`file ${relative(dir, path)} of the cached snapshot ${dir} has no blob (a dangling link)`);
      throw err;
    }
    try {
      for (;;) {
        if (cancelled()) return { snapshotDir: dir, commit, files: files.length, bytes, digest: '' };
        const { bytesRead } = await fh.read(buf, 0, buf.length, null);
        if (bytesRead === 0) break;
        hash.update(buf.subarray(0, bytesRead));
        bytes += bytesRead;
      }
    } finally {
      await fh.close();
    }
  }
  return { snapshotDir: dir, commit, files: files.length + (draft?.files ?? 0), bytes: bytes + (draft?.bytes ?? 0), digest: hash.digest('hex') };
}

/**
 * What transformers' AutoTokenizer needs from a local folder: a vocabulary
 * (holdsTokenizer, the store's own rule); tokenizer_config.json is optional
 * (get_tokenizer_config returns {} without it). The message is
 * transformers' OSError for a folder without one *(inferred:
 * tokenization_utils_base.py was not read)*.
 */
async function requireTokenizerFiles(dir: string): Promise<void> {
  const names = new Set<string>();
  for (const e of await readdir(dir, { withFileTypes: true }).catch(() => [])) if (e.isFile() || e.isSymbolicLink()) names.add(e.name);
  // A link counts only while its blob is there: a dangling one is no file to transformers either.
  const present = new Set<string>();
  for (const n of names) if ((await stat(join(dir, n)).catch(() => undefined))?.isFile()) present.add(n);
  if (holdsTokenizer((n) => present.has(n))) return;
  throw new MissingWeightsError(
    `OSError: Can't load tokenizer for '${dir}'. Make sure '${dir}' is the correct path to a directory containing all relevant files (a vocabulary: tokenizer.json, tokenizer.model, spiece.model, vocab.json with merges.txt, or vocab.txt); with HF_HUB_OFFLINE=1 nothing missing is fetched`,
  );
}

export { type CompileKey, compileMarkerPath, vllmCacheRoot } from './fake-compile-cache.js';

/**
 * What vLLM online does through huggingface_hub, in short: the revision's
 * file list from `<endpoint>/api/models/<repo>/revision/<rev>` (repo_info),
 * then only the files its loader reads (the index first, which picks the
 * safetensors: V:vllm/model_executor/model_loader/weight_utils.py:461-480;
 * never original/ nor .bin twins), each from
 * `<endpoint>/<repo>/resolve/<commit>/<path>` unless the hub cache already
 * has snapshots/<commit>/<path>: hf_hub_download given a commit returns an
 * existing pointer at once, with no request (huggingface_hub
 * file_download.py _hf_hub_download_to_cache_dir, "if user provides a
 * commit_hash and they already have the file on disk, shortcut
 * everything"), whether it is a link to the cache's own blob or to another
 * (issue 51: the agent links the store's blobs in). Fetched files are plain
 * files, not links to blobs: the double reads them, nothing else does. A
 * failure is the engine's (MissingWeightsError), as a download error fails
 * vLLM's start.
 */
async function fetchMissing(repo: string, revision: string, env: NodeJS.ProcessEnv, endpoint: string, rule: { engine: string; loadFormat?: string }, opts: { tokenizerOnly?: boolean } = {}): Promise<void> {
  const base = endpoint.replace(/\/+$/, '');
  const headers: Record<string, string> = env.HF_TOKEN ? { authorization: `Bearer ${env.HF_TOKEN}` } : {};
  const info = await fetch(`${base}/api/models/${repo}/revision/${encodeURIComponent(revision)}`, { headers });
  if (!info.ok) throw new MissingWeightsError(`huggingface_hub.errors.HfHubHTTPError: ${info.status} for ${base}/api/models/${repo}/revision/${revision}`);
  const { sha, siblings } = (await info.json()) as { sha: string; siblings: { rfilename: string }[] };
  if (!COMMIT.test(sha)) throw new MissingWeightsError(`the hub at ${base} named no commit for ${repo}@${revision}`);
  const repoDir = join(hubCacheDir(env), `models--${repo.replaceAll('/', '--')}`);
  const snap = join(repoDir, 'snapshots', sha);
  const names = siblings.map((f) => f.rfilename).filter((n) => !n.split('/').some((part) => part === '' || part === '.' || part === '..'));
  const get = async (name: string) => {
    const path = join(snap, ...name.split('/'));
    // os.path.exists follows the link: a pointer to a blob that is there is the file.
    if ((await stat(path).catch(() => undefined))?.isFile()) return;
    const res = await fetch(`${base}/${repo}/resolve/${sha}/${name}`, { headers });
    if (!res.ok) throw new MissingWeightsError(`huggingface_hub.errors.HfHubHTTPError: ${res.status} for ${name} of ${repo}`);
    await mkdir(dirname(path), { recursive: true });
    // A dangling link is replaced, never written through (it may point into the node's store).
    await rm(path, { force: true });
    await writeFile(path, Buffer.from(await res.arrayBuffer()));
  };
  if (opts.tokenizerOnly) {
    for (const name of names) if (!name.includes('/') && !WEIGHTS.test(name)) await get(name);
  } else {
    for (const index of [SAFE_WEIGHTS_INDEX, MISTRAL_INDEX]) if (names.includes(index)) await get(index);
  }
  const readIndex = (name: string) => {
    try {
      return weightMapFiles(readFileSync(join(snap, name), 'utf8'));
    } catch {
      return undefined;
    }
  };
  if (!opts.tokenizerOnly) for (const name of filesLoaderReads(names, readIndex, rule)) if (names.includes(name)) await get(name);
  if (!COMMIT.test(revision)) {
    await mkdir(join(repoDir, 'refs'), { recursive: true });
    await writeFile(join(repoDir, 'refs', ...revision.split('/')), sha);
  }
}
