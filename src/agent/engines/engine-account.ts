import { userInfo } from 'node:os';
import type { EngineName } from '../../lib/engine-names.js';
import type { EngineConfig } from '../config/agent-config.js';
import { describeEngineAccount } from '../../lib/describe-engine-account.js';
import type { Logger } from '../../lib/logger.js';

export { describeEngineAccount };

/**
 * Who an engine's processes run as. A root agent with an empty
 * `engines.<name>.user` used to run every engine as root, saying nothing,
 * so a control plane's profile that got code into the engine ran it as root
 * on every node (security review 2, N1); now such an engine is refused
 * unless `engines.<name>.allow_root` is true.
 */
export interface EngineAccount {
  engine: EngineName;
  /** engines.<name>.user, else the agent's own account ("root"). */
  user: string;
  uid: number;
  /** engines.<name>.user is set. */
  configured: boolean;
  /** A root agent, no user, allow_root true: the engine runs as root, as the operator chose. */
  allowRoot: boolean;
  /** A root agent, no user, allow_root false: every start of the engine is refused. */
  refused: boolean;
}

/** The agent's own account name; its uid where the system cannot name it. */
function ownName(uid: number): string {
  if (uid === 0) return 'root';
  try {
    return userInfo().username;
  } catch {
    return `uid ${uid}`;
  }
}

/** The account `engine` runs as, for an agent running as `agentUid`. */
export function engineAccount(engine: EngineName, config: Pick<EngineConfig, 'user' | 'allowRoot'> | undefined, agentUid: number): EngineAccount {
  if (config?.user) return { engine, user: config.user.name, uid: config.user.uid, configured: true, allowRoot: false, refused: false };
  const root = agentUid === 0;
  return { engine, user: ownName(agentUid), uid: agentUid, configured: false, allowRoot: root && config?.allowRoot === true, refused: root && config?.allowRoot !== true };
}

/** Why a start of an engine whose account is refused is refused: one line, naming both keys. */
export function rootEngineRefusal(engine: EngineName): string {
  return (
    `engines.${engine}.user is empty and the agent runs as root, so the engine would run as root; ` +
    `set engines.${engine}.user to an unprivileged account (useradd --system llmgw-engine), or engines.${engine}.allow_root: true to run it as root`
  );
}

/**
 * Said once at start, not at the first refused launch an operator may look
 * for hours later: each engine that runs as root, or whose starts will be
 * refused for it (the review found engines running as root with nothing in
 * the log saying so).
 */
export function logEngineAccounts(logger: Logger, accounts: readonly EngineAccount[]): void {
  for (const a of accounts) {
    if (a.refused) logger.warn({ engine: a.engine }, `${describeEngineAccount(a)}: every start of it will be refused`);
    else if (a.allowRoot) logger.warn({ engine: a.engine }, `${describeEngineAccount(a)}: the engine runs as root, as engines.${a.engine}.allow_root says`);
    else logger.info({ engine: a.engine, user: a.user, uid: a.uid }, `engine account: ${describeEngineAccount(a)}`);
  }
}
