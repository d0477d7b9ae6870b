import type { SupervisorConfig } from '../../config/agent-config.js';
import type { Logger } from '../../../lib/logger.js';
import type { EngineUids } from '../../../lib/process/process-table.js';

/** What finding and killing the engines a previous agent left needs of the registry. */
export interface OrphanContext {
  config: SupervisorConfig;
  log: Logger;
  /** Only their processes count as a shard's log writers. */
  engineUids: EngineUids;
  /** Signals an orphan's process group; process.kill(-pgid) when absent (see SupervisorOptions.signalOrphanGroup). */
  signalOrphanGroup?: (pgid: number, sig: NodeJS.Signals) => void;
}
