/**
 * The doubles' torch.compile caches (issue 51, review engine-fidelity-3 E10
 * and D8), laid out and keyed as the engines do, so that the agent's
 * `+compile` claim is tested against what the engines really leave:
 *
 * - vLLM: `<VLLM_CACHE_ROOT>/torch_compile_cache/<hash>/rank_<r>_<dp>/backbone`
 *   (V:vllm/compilation/backends.py:1058-1079, the hash over the config's
 *   compute_hash, of which the model path, revision, max-model-len, TP/PP and
 *   enable_sleep_mode, and the versions). At every compile start it writes
 *   cache_key_factors.json (:1114-1134), caching on or off; it logs
 *   "Using cache directory: <dir> for vLLM's torch.compile", or "vLLM's
 *   torch.compile cache is disabled." under VLLM_DISABLE_COMPILE_CACHE
 *   (:1081-1097); a compiled graph is read back from vllm_compile_cache.py
 *   (:183-187), written after a compile only with caching on (:215-221), and
 *   computation_graph.py is written at every compile (:1258-1270).
 * - SGLang: `<SGLANG_CACHE_DIR>/torch_compile_cache/<hash>/rank_0_0/<model_tag>`
 *   with sglang_compile_cache.py (S:python/sglang/srt/compilation/backend.py:93-109,
 *   404-418), and Triton's JIT kernels left in TRITON_CACHE_DIR, which do not
 *   make the next start skip its compile.
 */
import { createHash } from 'node:crypto';
import { mkdir, rename, stat, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { isNotFound } from '../lib/errno.js';

/**
 * What the double hashes of vLLM's compile-cache key (ModelConfig.compute_hash,
 * V:vllm/config/model.py:412-463: every field but the ignored ones).
 */
export interface CompileKey {
  /**
   * ModelConfig.model as vLLM holds it: the repo id online, the snapshot's
   * folder under HF_HUB_OFFLINE, which rewrites it before the config is built
   * (V:vllm/engine/arg_utils.py:809-822). So the first offline start after
   * online ones compiles again (review engine-fidelity-2 §3 N14).
   */
  model: string;
  /** The snapshot's commit when the weights were read; the revision otherwise. */
  revision: string;
  tp: number;
  pp: number;
  version: string;
  /** enable_sleep_mode is a hashed ModelConfig field (V:vllm/config/model.py:338). */
  sleepMode: boolean;
  /** --max-model-len as given (ModelConfig.max_model_len, hashed); '' when not given. */
  maxModelLen?: string;
}

/** vllm/envs.py VLLM_CACHE_ROOT. */
export function vllmCacheRoot(env: NodeJS.ProcessEnv): string {
  return env.VLLM_CACHE_ROOT || join(env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'vllm');
}

/** SGLang's SGLANG_CACHE_DIR (S:python/sglang/srt/environ.py), ~/.cache/sglang by default. */
export function sglangCacheDir(env: NodeJS.ProcessEnv): string {
  return env.SGLANG_CACHE_DIR || join(homedir(), '.cache', 'sglang');
}

/** vLLM's local_cache_dir for this key (rank 0, DP 0, the backbone prefix). */
export function vllmLocalCacheDir(env: NodeJS.ProcessEnv, key: CompileKey): string {
  const parts: unknown[] = [key.model, key.revision, key.tp, key.pp, key.version, key.sleepMode];
  if (key.maxModelLen) parts.push(key.maxModelLen);
  const hash = createHash('sha256').update(JSON.stringify(parts)).digest('hex').slice(0, 10);
  return join(vllmCacheRoot(env), 'torch_compile_cache', hash, 'rank_0_0', 'backbone');
}

/** The file a vLLM start reads its compiled graphs back from (vllm_compile_cache.py). */
export function compileMarkerPath(env: NodeJS.ProcessEnv, key: CompileKey): string {
  return join(vllmLocalCacheDir(env, key), 'vllm_compile_cache.py');
}

/** VLLM_DISABLE_COMPILE_CACHE as vllm/envs.py reads it: bool(int(...)). */
export function compileCacheDisabled(env: NodeJS.ProcessEnv): boolean {
  const v = env.VLLM_DISABLE_COMPILE_CACHE ?? '0';
  return /^-?\d+$/.test(v) && Number(v) !== 0;
}

async function exists(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isFile();
  } catch (err) {
    if (isNotFound(err)) return false;
    throw err;
  }
}

/** Written aside and renamed: a start killed while writing leaves nothing to trust. */
async function writeAtomic(path: string, text: string): Promise<void> {
  const tmp = `${path}.${process.pid}.tmp`;
  await writeFile(tmp, text);
  await rename(tmp, path);
}

export interface CompileRun {
  /** Where the engine's log lines go: (file:line as the engine logs it, message). */
  log: (where: string, message: string) => void;
  /** Spends the compile's time; resolves early when the start is stopped. */
  wait: (ms: number) => Promise<void>;
  stopped: () => boolean;
  compileTimeMs: number;
}

/** vLLM's compile: the metadata first, caching on or off; the compile skipped only on a cache file of this key. */
export async function vllmCompile(env: NodeJS.ProcessEnv, key: CompileKey, run: CompileRun): Promise<void> {
  const dir = vllmLocalCacheDir(env, key);
  await mkdir(dir, { recursive: true });
  const disabled = compileCacheDisabled(env);
  if (disabled) run.log('backends.py:1092', "vLLM's torch.compile cache is disabled.");
  else run.log('backends.py:1094', `Using cache directory: ${dir} for vLLM's torch.compile`);
  const meta = join(dir, 'cache_key_factors.json');
  if (!(await exists(meta))) await writeAtomic(meta, `${JSON.stringify({ config_hash: key, env: {}, code_hash: 'sim', compiler_hash: key.version }, null, 2)}\n`);
  const cacheFile = join(dir, 'vllm_compile_cache.py');
  if (!disabled && (await exists(cacheFile))) {
    run.log('backends.py:293', `Directly load the compiled graph(s) for dynamic shape from the cache, took 0.010 s (${cacheFile})`);
    return;
  }
  run.log('backends.py:600', `Compiling a graph for dynamic shape (--sim-compile-time ${run.compileTimeMs} ms; no compiled graph at ${cacheFile})`);
  await writeAtomic(join(dir, 'computation_graph.py'), '# the double traced nothing\n');
  await run.wait(run.compileTimeMs);
  if (run.stopped()) return;
  if (!disabled) await writeAtomic(cacheFile, `{(None, 0, 'inductor'): ('sim', ${JSON.stringify(JSON.stringify(key))})}\n`);
  run.log('monitor.py:34', `torch.compile takes ${(run.compileTimeMs / 1000).toFixed(2)} s in total`);
}

/** SGLang's compile: keyed by the compiler alone, Triton kernels left beside it whatever happens. */
export async function sglangCompile(env: NodeJS.ProcessEnv, modelTag: string, version: string, run: CompileRun): Promise<void> {
  const hash = createHash('sha256').update(JSON.stringify(['sim-inductor', version])).digest('hex').slice(0, 10);
  const dir = join(sglangCacheDir(env), 'torch_compile_cache', hash, 'rank_0_0', modelTag.replaceAll('/', '_'));
  await mkdir(dir, { recursive: true });
  if (env.TRITON_CACHE_DIR) {
    // A JIT kernel of the attention backend: written at every start, read by no compile.
    const kernel = join(env.TRITON_CACHE_DIR, 'sim-kernel');
    await mkdir(kernel, { recursive: true });
    await writeAtomic(join(kernel, 'kernel.json'), '{}\n');
  }
  const cacheFile = join(dir, 'sglang_compile_cache.py');
  if (await exists(cacheFile)) return;
  await run.wait(run.compileTimeMs);
  if (run.stopped()) return;
  await writeAtomic(cacheFile, `{(None, 0, 'inductor'): 'sim'}\n`);
  run.log('backend.py:180', 'Cache the graph for dynamic shape for later use');
  run.log('backend.py:206', `Compiling a graph for dynamic shape takes ${(run.compileTimeMs / 1000).toFixed(2)} s`);
}
