import type { HubRepoRef } from '../../models/judge-offline-start.js';
import { type FlagHit, findFlags } from './find-flags.js';

/**
 * The options of an engine that load code, open or write files, or reach an
 * endpoint, which a control plane's profile args may set only where the
 * operator lists them in `engines.<name>.allowed_args`; and the options
 * whose value names a model (a hub repo id passes, a local path only under
 * `engines.<name>.model_roots`). The control plane chooses what runs as the
 * engine's user on every node: `--trust-remote-code` with a repo it chose ran
 * that repo's Python, `--tool-parser-plugin FILE` imported a file,
 * `--allowed-local-media-path /` served every file to API clients,
 * `--chat-template /etc/shadow` read one (security review 2, N1).
 *
 * Each option is listed with its aliases, the name an operator lists first.
 * `extra_args` is the operator's own and is not judged.
 */
export interface CodeLoadingArgs {
  /** Refused unless allowed_args names one of its spellings. */
  refused: readonly (readonly string[])[];
  /** Their value is a model, tokenizer or config: a hub repo id, or a path under a model root, unless allowed_args names them. */
  modelPaths: readonly (readonly string[])[];
  /**
   * For a modelPaths option (by its first name) whose hub repo the engine
   * reads at start: the option that sets the revision it is read at, main
   * when that option is absent; '' when the engine passes no revision (main
   * always). A start is offline only when each such repo is in the store at
   * that revision (judgeOfflineStart).
   */
  hubRevisions?: Readonly<Record<string, string>>;
  /**
   * Options (all spellings) whose JSON value may name a hub repo the engine
   * reads at start, with the keys of the repo and of its revision: vLLM's
   * draft model inside --speculative-config. Only an operator's allowed_args
   * lets them through; then they count for an offline start too.
   */
  hubRepoInJson?: readonly { flags: readonly string[]; repoKey: string; revisionKey: string }[];
  /** The engine's own options that are a prefix of a listed one (see FlagSet.mayPass). */
  mayPass: readonly string[];
  /** vLLM's FlexibleArgumentParser spellings (see FlagSet.flexible). */
  flexible?: boolean;
}

/** What a profile's args ask that the operator has not allowed. */
export interface CodeLoadingHit extends FlagHit {
  /** refused: listed in `refused`; model-path: its value must be checked as a model reference. */
  kind: 'refused' | 'model-path';
}

/** An engine that loads no model and no code of the control plane's choosing (the sim). */
export const NO_CODE_LOADING_ARGS: CodeLoadingArgs = { refused: [], modelPaths: [], mayPass: [] };

/**
 * The profile args that set an option of `list` which `allowedArgs` (the
 * operator's engines.<name>.allowed_args) does not name, in argv order. An
 * entry allows an option by any of its spellings: `--speculative-config`
 * allows `-sc` and `--speculative_config.model` too.
 */
export function codeLoadingArgsIn(args: readonly string[], list: CodeLoadingArgs, allowedArgs: readonly string[]): CodeLoadingHit[] {
  const spell = (f: string) => (list.flexible && f.startsWith('--') ? `--${f.slice(2).replaceAll('_', '-')}` : f);
  const allowed = new Set(allowedArgs.map(spell));
  const groups = [...list.refused.map((g) => ({ g, kind: 'refused' as const })), ...list.modelPaths.map((g) => ({ g, kind: 'model-path' as const }))];
  const groupOf = new Map(groups.flatMap(({ g, kind }) => g.map((f) => [f, { g, kind }] as const)));
  const flags = [...groupOf.keys()];
  const hits: CodeLoadingHit[] = [];
  for (const hit of findFlags(args, { flags, mayPass: list.mayPass, flexible: list.flexible })) {
    const group = groupOf.get(hit.flag);
    if (!group || group.g.some((f) => allowed.has(f))) continue;
    // The option's first name: what the operator lists, and what a message names.
    hits.push({ ...hit, flag: group.g[0] as string, kind: group.kind });
  }
  return hits;
}

/**
 * The repos other than the model that a profile's args make the engine read
 * at start (a tokenizer, a draft model), each with the revision it is read
 * at: what must be in the store too for an offline start. Every spelling of
 * an option counts, allowed or not (allowed_args lets a path through
 * validation; it does not put the repo in the store).
 */
export function hubReposIn(args: readonly string[], list: CodeLoadingArgs): HubRepoRef[] {
  const revisions = list.hubRevisions ?? {};
  const groups = list.modelPaths.filter((g) => (g[0] as string) in revisions);
  const firstName = new Map(groups.flatMap((g) => g.map((f) => [f, g[0] as string] as const)));
  const revisionFlags = [...new Set(Object.values(revisions).filter((f) => f !== ''))];
  const given = new Map<string, string>();
  // `--tokenizer x` begins `--tokenizer-revision`, but argparse takes the exact option first.
  const exact = [...list.mayPass, ...list.modelPaths.flat()];
  for (const hit of findFlags(args, { flags: revisionFlags, mayPass: exact, flexible: list.flexible })) {
    if (hit.value !== undefined) given.set(hit.flag, hit.value);
  }
  const refs: HubRepoRef[] = [];
  for (const hit of findFlags(args, { flags: [...firstName.keys()], mayPass: list.mayPass, flexible: list.flexible })) {
    const name = firstName.get(hit.flag);
    if (name === undefined || hit.value === undefined) continue;
    const revisionFlag = revisions[name] ?? '';
    refs.push({ namedBy: name, value: hit.value, revision: (revisionFlag !== '' ? given.get(revisionFlag) : undefined) ?? 'main' });
  }
  for (const j of list.hubRepoInJson ?? []) {
    for (const hit of findFlags(args, { flags: j.flags, mayPass: list.mayPass, flexible: list.flexible })) {
      const ref = repoInJson(hit.value, j.repoKey, j.revisionKey);
      if (ref) refs.push({ namedBy: j.flags[0] as string, ...ref });
    }
  }
  return refs;
}

/**
 * The repo a JSON option value names under `repoKey`, at `revisionKey`
 * (main when absent). A value that is not a JSON object is the dotted
 * spelling's (`--speculative-config.model x`): taken as the repo itself, at
 * main, which a judge that finds it no hub id then ignores.
 */
function repoInJson(value: string | undefined, repoKey: string, revisionKey: string): { value: string; revision: string } | undefined {
  if (value === undefined) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch {
    return { value, revision: 'main' };
  }
  if (typeof parsed !== 'object' || parsed === null) return undefined;
  const o = parsed as Record<string, unknown>;
  const repo = o[repoKey];
  if (typeof repo !== 'string') return undefined;
  const revision = o[revisionKey];
  return { value: repo, revision: typeof revision === 'string' && revision !== '' ? revision : 'main' };
}
