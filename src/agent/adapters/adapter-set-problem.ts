import type { AdapterSpec } from '../../gen/llmgw/v1/agent_pb.js';
import { firstUnprintable } from '../../lib/printable.js';
import { checkRevision, repoIdProblem } from '../../models/repo-id.js';
import type { AdapterLimits } from './adapter-limits.js';

/**
 * An adapter's name is what clients send as a request's model, what the
 * engine files it under, and what the agent's ledger, logs and `ctl` print:
 * a short printable word, never a path (SGLang once evicted the wrong
 * buffer for a reused name, #8263; a name with "/" or ".." reads as a path
 * in the engines' loaders, which also take a lora_path).
 */
export const ADAPTER_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** Most adapters a set may list, whatever the profile says: more than any engine's --max-loras takes on one GPU. */
export const MAX_ADAPTERS = 64;

/** Highest --max-lora-rank accepted: vLLM's largest supported rank (V:vllm/config/lora.py, `max_lora_rank` Literal up to 512). */
export const MAX_ADAPTER_RANK = 512;

/** What a set is judged against: the shard's names and the engine's limits. */
export interface AdapterSetContext {
  /** The names the shard already serves under (served model name, model): an adapter may not shadow them. */
  reservedNames: readonly string[];
  limits: AdapterLimits;
  /** The engine kind's name, and whether it has an adapter API (EngineKind.adapters). */
  engine: string;
  hasAdapterApi: boolean;
}

const quote = (v: string) => {
  const q = JSON.stringify(v);
  return q.length > 80 ? `${q.slice(0, 76)}..."` : q;
};

/**
 * Why `adapters` may not be a shard's desired set, in one line that names
 * what is wrong and what to do, or undefined when it may. Judged whole
 * before anything is pulled or asked of the engine: a set refused here
 * leaves the engine untouched. Checked cheap to dear: the count first (a
 * million entries is one problem), then each adapter.
 */
export function adapterSetProblem(adapters: readonly AdapterSpec[], ctx: AdapterSetContext): string | undefined {
  if (adapters.length === 0) return undefined;
  if (!ctx.hasAdapterApi) {
    return `engine ${ctx.engine} serves no LoRA adapters; remove adapters from the shard or use an engine that loads them (vllm, sglang)`;
  }
  const most = Math.min(ctx.limits.maxLoaded, MAX_ADAPTERS);
  if (adapters.length > most) {
    const why = ctx.limits.maxLoaded > MAX_ADAPTERS ? `at most ${MAX_ADAPTERS} are accepted` : `the engine holds ${ctx.limits.maxLoaded} at once (max_adapters, or --max-loras in the profile's args)`;
    return `adapters lists ${adapters.length}; ${why}; list fewer or raise the limit at the shard's start`;
  }
  const seen = new Set<string>();
  for (const [i, a] of adapters.entries()) {
    const at = `adapters[${i}]`;
    if (!ADAPTER_NAME.test(a.name)) {
      const bad = firstUnprintable(a.name);
      const shown = bad === undefined ? quote(a.name) : `(with the control character ${bad})`;
      return `${at}.name ${shown} is not an adapter name; use 1 to 64 of A-Z a-z 0-9 . _ -, beginning with a letter or digit`;
    }
    if (seen.has(a.name)) return `${at}.name ${a.name} is listed twice; give each adapter its own name`;
    seen.add(a.name);
    if (ctx.reservedNames.includes(a.name)) return `${at}.name ${a.name} is the shard's own model name; name the adapter otherwise`;
    const repo = repoIdProblem(a.repo);
    if (repo !== undefined) return `${at}.repo ${repo}`;
    try {
      checkRevision(a.revision === '' ? 'main' : a.revision);
    } catch (err) {
      return `${at}.${(err as Error).message}`;
    }
  }
  return undefined;
}

/** What a resolved adapter is checked against once its files are known. */
export interface ResolvedAdapterContext {
  /** The shard's model as its profile names it (a hub id or a local path), and its served name. */
  baseModels: readonly string[];
  maxRank: number;
}

/**
 * Why an adapter found in the store may not be loaded on this shard: made
 * for another base model, or of a rank above the engine's --max-lora-rank
 * (which vLLM refuses at load, V:vllm/lora/peft_helper.py:124-128, and
 * SGLang at its start). One line with what to do.
 *
 * The base is refused, not warned of: neither engine's load reads
 * base_model_name_or_path (no use under V:vllm/lora at 017e9f44 nor under
 * S:python/sglang/srt at 6ed5780c; vLLM's filesystem resolver plugin alone
 * matches it to pick adapters for a base,
 * V:vllm/plugins/lora_resolvers/filesystem_resolver.py:38), so an adapter of another base
 * whose shapes fit is loaded and served wrong without an error, and its
 * first proof has no record to be held to. A base named by a local path
 * (the trainer's own folder: `/…`, `./…`, `~/…`) names no hub model and is
 * not compared (calling that healthy adapter broken would be the false
 * judgement); its proof still runs.
 */
export function resolvedAdapterProblem(a: { name: string; baseModel: string; rank: number }, ctx: ResolvedAdapterContext): string | undefined {
  if (a.baseModel !== '' && !isLocalPath(a.baseModel) && !ctx.baseModels.some((m) => sameBase(m, a.baseModel))) {
    return `adapter ${a.name} is for base model ${quote(a.baseModel)}, not this shard's ${quote(ctx.baseModels[0] ?? '')}; load it on a shard of its base`;
  }
  if (a.rank > ctx.maxRank) return `adapter ${a.name} has rank ${a.rank}, above the shard's max_adapter_rank ${ctx.maxRank}; start the shard with a higher one or use a lower-rank adapter`;
  return undefined;
}

/** base_model_name_or_path as the trainer's machine's folder, not a hub id. */
const isLocalPath = (base: string) => /^(?:\/|\.{1,2}\/|~)/.test(base) || base.includes('\\');

/** A hub id names itself; a local model (a path) matches an adapter's base by its last two segments (org/name), as a snapshot folder does not. */
function sameBase(model: string, base: string): boolean {
  if (model === base) return true;
  if (!model.startsWith('/')) return false;
  const tail = model.replace(/\/+$/, '').split('/').slice(-2).join('/');
  return tail === base;
}
