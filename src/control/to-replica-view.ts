import type { NodeRecord } from './node-view.js';
import type { ReplicaRecord, ShardRecord } from './replica-record.js';
import type { ReplicaView, ShardView } from './replica-view.js';
import { stateName } from '../lib/shard-states.js';

/** The public face of a replica record; `node` looks up where its leader runs, for the url. */
export function toReplicaView(r: ReplicaRecord, node: (nodeId: string) => NodeRecord | undefined): ReplicaView {
  const leader = r.shards.find((s) => s.rank === 0);
  const view: ReplicaView = {
    id: r.spec.id,
    group: r.spec.group,
    profile: r.spec.profile.name,
    engine: r.spec.profile.engine,
    servedModelName: r.spec.profile.servedModelName,
    phase: r.phase,
    generation: r.generation,
    nnodes: r.spec.nnodes,
    gpusPerShard: r.spec.gpusPerShard,
    pool: r.spec.pool,
    shards: r.shards.map(shardView),
  };
  if (r.phase === 'ready' && leader) view.url = `http://${node(leader.nodeId)?.register.mgmtAddr || '127.0.0.1'}:${leader.httpPort}`;
  if (r.lastError) view.lastError = r.lastError;
  return view;
}

function shardView(s: ShardRecord): ShardView {
  // Copied without the timer, which is the reconciler's own business.
  const { startupTimer: _, ...fields } = s;
  return { ...fields, gpuIndices: [...s.gpuIndices], stateName: stateName(s.state) };
}
