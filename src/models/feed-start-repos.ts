import type { HubRepoRef } from './judge-offline-start.js';
import { storeRepos } from './judge-offline-start.js';
import { feedEngineHub } from './feed-engine-hub.js';
import type { LoaderRule } from './loader-files.js';
import type { StoreLayout } from './store-layout.js';

/*
 * Every hub repo an online start reads, fed from the store (issue 51): the
 * model, and the repos its args name besides it (hubReposIn: vLLM's
 * --tokenizer and --speculative-config's draft "model", SGLang's
 * --tokenizer-path and --speculative-draft-model-path), each at the revision
 * its engine reads it at. The engines resolve them through the same hub
 * cache as the model:
 *
 * - vLLM's tokenizer: get_model_path at --tokenizer-revision (None: main)
 *   (V:vllm/engine/arg_utils.py:809-832, V:vllm/transformers_utils/repo_utils.py:279-297);
 *   online, transformers asks hf_hub_download file by file, which finds a
 *   pointer already in snapshots/<commit>/ and downloads nothing.
 * - vLLM's draft model: a ModelConfig of its own, at the config's "revision"
 *   (None: main), loaded by the same model loader and snapshot_download as
 *   the model (V:vllm/config/speculative.py:94, 132, 903-917).
 * - SGLang's tokenizer at the model's --revision (S:python/sglang/srt/managers/tokenizer_manager.py:517,
 *   S:python/sglang/srt/server_args.py:4348-4352); its draft at
 *   --speculative-draft-model-revision, else main (server_args.py:2079, 4354-4357),
 *   its weights by the same loader as the model (S:python/sglang/srt/model_loader/weight_utils.py:648-710).
 *
 * So each gets, in the engine's own hub cache, links to the store's verified
 * blobs of the files that engine's loader reads (feed-engine-hub.ts), and the
 * engine fetches only what the store lacks of any of them.
 */

export interface FeedStartReposOptions {
  layout: StoreLayout;
  /** profile.model, at its revision and with its loader rule (its --load-format). */
  model: { repo: string; revision: string; rule: LoaderRule };
  /** The other hub repos the profile's args name. */
  others: readonly HubRepoRef[];
  engine: string;
  engineHubDir: string;
  account?: { uid: number; gid: number };
}

/**
 * Feeds each repo the store holds any of; the note for ctl status (what was
 * linked, per repo), undefined when the store held nothing of any. Throws,
 * refusing the start and naming the file, when a blob changed in place.
 */
export async function feedStartRepos(o: FeedStartReposOptions): Promise<string | undefined> {
  const repos = [{ ...o.model, namedBy: '' }, ...storeRepos(o.others).map((r) => ({ repo: r.value, revision: r.revision, rule: { engine: o.engine }, namedBy: r.namedBy }))];
  const said: string[] = [];
  const seen = new Set<string>();
  for (const r of repos) {
    // A draft that is also the tokenizer (or the model itself) is linked once.
    const key = `${r.repo}@${r.revision}`;
    if (seen.has(key)) continue;
    seen.add(key);
    const fed = await feedEngineHub({ layout: o.layout, repo: r.repo, revision: r.revision, rule: r.rule, engineHubDir: o.engineHubDir, ...(o.account ? { account: o.account } : {}) });
    if (!fed) continue;
    const of = `${r.namedBy ? `${r.namedBy} ` : ''}${r.repo}`;
    said.push(fed.error ? `the store's files of ${of} could not be linked into its hub cache (${fed.error}): it fetches them too` : `${fed.linked.length} file${fed.linked.length === 1 ? '' : 's'} of ${of} linked from the store into its hub cache`);
  }
  return said.length > 0 ? `${said.join('; ')}, the rest fetched` : undefined;
}
