/**
 * The vLLM double's warm-up (fake-vllm.ts): the work a start does before its
 * model serves, whose cost depends on the node's caches (fake-weights.ts).
 */
import { existsSync } from 'node:fs';
import { vllmLog } from './engine-log.js';
import type { FakeVllmOptions } from './fake-vllm-args.js';
import { type CompileKey, vllmCompile } from './fake-compile-cache.js';
import { findSnapshot, hubOffline, readWeights } from './fake-weights.js';

/**
 * What a start costs before its model serves, by what the node has cached:
 * the weights read from the hub cache (--sim-read-weights), then the
 * compile, skipped when VLLM_CACHE_ROOT holds its marker (--sim-compile-time).
 * `wait` is a timer the engine clears at exit; `stopped` ends the work when
 * the start was stopped meanwhile.
 */
export async function warmUp(o: FakeVllmOptions, env: NodeJS.ProcessEnv, stopped: () => boolean, wait: (ms: number) => Promise<void>): Promise<string | undefined> {
  const k = o.knobs;
  let revision = o.revision;
  let digest: string | undefined;
  let hashedModel = o.model;
  if (hubOffline(env) && !existsSync(o.model)) {
    // V:vllm/engine/arg_utils.py:809-822 (get_model_path, V:vllm/transformers_utils/repo_utils.py:279-297):
    // offline, the model id becomes its local snapshot folder, and fails the start when there is none.
    hashedModel = (await findSnapshot(o.model, o.revision, env)).dir;
    vllmLog('INFO', 'arg_utils.py:817', `HF_HUB_OFFLINE is True, replace model_id [${o.model}] to model_path [${hashedModel}]`);
  }
  if (k.readWeights) {
    const t0 = performance.now();
    const read = await readWeights(o.model, o.revision, env, stopped, { engine: 'vllm', loadFormat: o.loadFormat, ...(o.tokenizer ? { tokenizer: o.tokenizer } : {}), ...(o.draft ? { draft: o.draft } : {}) });
    if (stopped()) return undefined;
    revision = read.commit;
    digest = read.digest;
    const s = ((performance.now() - t0) / 1000).toFixed(2);
    vllmLog('INFO', 'default_loader.py:291', `Loading weights took ${s} seconds: ${read.files} files, ${read.bytes} bytes from ${read.snapshotDir}`);
  }
  if (k.compileTimeMs === 0) return digest;
  const key: CompileKey = { model: hashedModel, revision, tp: o.tp, pp: o.pp, version: o.version, sleepMode: o.sleepMode, maxModelLen: o.maxModelLen ?? '' };
  await vllmCompile(env, key, { log: (where, message) => vllmLog('INFO', where, message), wait, stopped, compileTimeMs: k.compileTimeMs });
  return digest;
}
