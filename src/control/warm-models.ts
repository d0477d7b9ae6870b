import type { Inventory } from '../gen/llmgw/v1/agent_pb.js';

/** How placement names a model at a revision: `org/name@main`. */
export function warmKey(repo: string, revision: string): string {
  return `${repo}@${revision}`;
}

/** The models a node's store holds complete (Inventory.cached_models), as warmKey()s. */
export function warmModels(inventory: Pick<Inventory, 'cachedModels'>): Set<string> {
  return new Set(inventory.cachedModels.filter((m) => m.complete).map((m) => warmKey(m.repo, m.revision)));
}

/** The model and revision a profile loads: its --revision (`--revision x` or `--revision=x`), main when absent, as the agent reads it. */
export function profileModelKey(profile: { model: string; args: readonly string[] }): string {
  let revision = 'main';
  for (let i = 0; i < profile.args.length; i++) {
    const a = profile.args[i] as string;
    if (a === '--revision') revision = profile.args[i + 1] ?? 'main';
    else if (a.startsWith('--revision=')) revision = a.slice('--revision='.length);
  }
  return warmKey(profile.model, revision);
}
