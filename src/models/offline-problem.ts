import { readManifest } from './model-manifest.js';
import { COMMIT_HASH } from './repo-id.js';
import { isSnapshotComplete } from './scan-store.js';
import type { StoreLayout } from './store-layout.js';

/**
 * Files of a repo no engine opens at start: the model card, licences, git
 * attributes, pictures. huggingface_hub's snapshot_download fetches them, but
 * vLLM loads weights by pattern (download_weights_from_hf,
 * V:vllm/model_executor/model_loader/weight_utils.py:422-452)
 * and transformers opens config, tokenizer and template files by name
 * *(inferred: transformers was not read)*. Everything else in a repo counts
 * as read, so a judgement errs towards starting online, which costs hub
 * requests, never a failed start.
 */
const NEVER_READ_AT_START = /(^|\/)(README|LICEN[CS]E|NOTICE|USE_POLICY)[^/]*$|\.(md|png|jpe?g|gif|svg|webp)$|(^|\/)\.gitattributes$/i;

/**
 * Why an engine could not start offline from `repo` at `revision` in the
 * store, or undefined when it could: huggingface_hub with HF_HUB_OFFLINE=1
 * resolves the snapshot locally and raises LocalEntryNotFoundError for any
 * file it would have to fetch (V:vllm/transformers_utils/repo_utils.py:279-297,
 * V:vllm/engine/arg_utils.py:809-832; S:python/sglang/srt/model_loader/
 * weight_utils.py:648-710), after the engine has loaded for a while, or,
 * for a chat template left out, it serves with none (engine-fidelity review
 * 2, N4). So the snapshot must be complete and hold every file the engine
 * reads: a pull of the whole repo does; a pull with --include does only when
 * the manifest lists the repo's files and none the engine reads was left out.
 */
export async function offlineProblem(layout: StoreLayout, repo: string, revision: string): Promise<string | undefined> {
  const manifest = await readManifest(layout, repo);
  const commit = manifest?.refs[revision] ?? (COMMIT_HASH.test(revision) ? revision : undefined);
  if (commit === undefined || !(await isSnapshotComplete(layout, manifest, commit))) {
    return `${repo}@${revision} is not complete in the node's model store`;
  }
  const snap = manifest?.snapshots[commit];
  if (!snap || snap.include.length === 0) return undefined;
  const pulled = `${repo}@${revision} was pulled with --include ${snap.include.join(' ')}`;
  if (snap.repoFiles === undefined) return `${pulled}, so files the engine reads at start (tokenizer, chat template) may be missing from the store`;
  const have = new Set(snap.files.map((f) => f.path));
  const missing = snap.repoFiles.filter((p) => !have.has(p) && !NEVER_READ_AT_START.test(p));
  if (missing.length === 0) return undefined;
  const shown = missing.slice(0, 3).join(', ');
  return `${pulled}, which left out ${shown}${missing.length > 3 ? ` and ${missing.length - 3} more` : ''}`;
}
