import type { Logger } from '../../lib/logger.js';
import type { EngineAccount } from '../engines/engine-account.js';
import { CompileClaims } from './compile-claims.js';
import type { NodeModels } from './node-models.js';

/** The agent's CompileClaims, kept in `path`; none without a model store. */
export function compileClaimsFor(models: NodeModels, path: string, uidOf: (engine: string) => number, logger: Logger, onChange?: () => void): CompileClaims | undefined {
  const store = models.store;
  const caches = models.engineCaches;
  return store && caches ? new CompileClaims({ path, layout: store.layout, caches, uidOf, logger, onChange }) : undefined;
}

/** The uid the next start of `engine` runs as: its account under this agent, the agent's own when it has none. */
export function engineUid(accounts: readonly EngineAccount[], engine: string): number {
  return accounts.find((a) => a.engine === engine)?.uid ?? process.getuid?.() ?? -1;
}
