import type { Logger } from '../../../lib/logger.js';
import type { SupervisorConfig } from '../../config/agent-config.js';
import type { LauncherChoice } from '../launch/choose-launcher.js';
import type { KnownAnswerBook } from '../probes/known-answer-book.js';
import type { GangFault } from './shard-machine.js';
import type { ShardSnapshot, ShardTransition } from './shard-snapshot.js';

/** What every runner of one supervisor shares. */
export interface ShardRunnerContext {
  config: SupervisorConfig;
  log: Logger;
  /** Hears every transition of the shard, after it is made and logged. */
  onTransition: (t: ShardTransition) => void;
  /** Hears a change of what the shard's status says without a change of state (a squatter on a STARTING shard's port). */
  onStatus: (shard: ShardSnapshot) => void;
  /** The launcher new engines get (config.launcher with auto decided); config.launcher decided here when absent. */
  launcher?: () => Promise<LauncherChoice>;
  /** Which peer rank of a gang went before this rank's engine ended (first-to-go.ts, from the composition root); none: not asked. */
  firstToGo?: (shard: ShardSnapshot, endedAtMs: number) => Promise<GangFault | undefined>;
  /** The node's known answers by model content, profile and engine version (known-answer-book.ts); none: starts are not checked. */
  knownAnswers?: KnownAnswerBook;
}
