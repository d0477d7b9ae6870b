import { readStateFileSync } from '../../../lib/files/state-file.js';
import type { Logger } from '../../../lib/logger.js';
import { findRecordedShardIds, findShardLogWriters, judgeOrphan } from '../../../lib/process/judge-orphan.js';
import type { Orphan } from '../../../lib/process/orphan.js';
import type { EngineUids } from '../../../lib/process/process-table.js';
import { shardStatePath } from '../../../lib/shard-layout.js';
import type { SupervisorConfig } from '../../config/agent-config.js';
import { judgeUnitOrphan } from './unit-orphan.js';

/**
 * Shards `isSupervised` does not know but a previous agent left behind,
 * each judged alive or dead and identified or not (judgeOrphan).
 */
export async function findOrphans(ctx: OrphanContext, isSupervised: (shardId: string) => boolean): Promise<Orphan[]> {
  const dirs = { ...ctx.config, engineUids: ctx.engineUids };
  // One scan of /proc for every shard, not one each (findShardLogWriters).
  const writers = findShardLogWriters(dirs);
  const ids = findRecordedShardIds(dirs, (file) => ctx.log.warn({ file }, 'ignoring a state file whose name is not a shard id'), writers);
  const orphans: Orphan[] = [];
  for (const id of ids.filter((id) => !isSupervised(id))) {
    const read = readStateFileSync(shardStatePath(ctx.config.stateDir, id), id);
    const o = judgeOrphan(dirs, id, writers, read);
    orphans.push(read.ok ? await judgeUnitOrphan(o, read.file, ctx.log) : o);
  }
  return orphans;
}

/** What finding and killing the engines a previous agent left needs of the registry. */
export interface OrphanContext {
  config: SupervisorConfig;
  log: Logger;
  /** Only their processes count as a shard's log writers. */
  engineUids: EngineUids;
  /** Signals an orphan's process group; process.kill(-pgid) when absent (see SupervisorOptions.signalOrphanGroup). */
  signalOrphanGroup?: (pgid: number, sig: NodeJS.Signals) => void;
}
