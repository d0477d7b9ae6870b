import type { LoaderRule } from './loader-files.js';
import { loaderSnapshotAt } from './loader-snapshot.js';
import type { StoreLayout } from './store-layout.js';

export { NEVER_READ_AT_START } from './loader-files.js';

/**
 * Why an engine could not start offline from `repo` at `revision` in the
 * store, or undefined when it could: huggingface_hub with HF_HUB_OFFLINE=1
 * resolves the snapshot locally and raises LocalEntryNotFoundError for any
 * file it would have to fetch (V:vllm/transformers_utils/repo_utils.py:279-297,
 * V:vllm/engine/arg_utils.py:809-832; S:python/sglang/srt/model_loader/
 * weight_utils.py:648-710), after the engine has loaded for a while, or,
 * for a chat template left out, it serves with none (engine-fidelity review
 * 2, N4). So the pull must be whole and the store must hold every file the
 * engine's loader reads at that revision (loader-files.ts, with the loaders'
 * source lines): a pull with --include that left out only what the loader
 * skips (`original/`, `.bin` twins of indexed safetensors) starts offline,
 * with no hub request (review engine-fidelity-3 E12); one that left out a
 * weight or a tokenizer file does not.
 */
export async function offlineProblem(layout: StoreLayout, repo: string, revision: string, rule: LoaderRule = { engine: 'vllm' }): Promise<string | undefined> {
  const s = await loaderSnapshotAt(layout, repo, revision, rule);
  if (s === undefined || !s.pulledComplete) return `${repo}@${revision} is not complete in the node's model store`;
  if (s.missing?.length === 0) return undefined;
  const pulled = `${repo}@${revision} was pulled with --include ${s.include.join(' ')}`;
  if (s.missing === undefined) return `${pulled}, so files the engine reads at start (tokenizer, chat template) may be missing from the store`;
  const shown = s.missing.slice(0, 3).join(', ');
  return `${pulled}, which left out ${shown}${s.missing.length > 3 ? ` and ${s.missing.length - 3} more` : ''}`;
}
