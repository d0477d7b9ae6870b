import type { NodeRecord, NodeView } from './node-view.js';
import { stateName } from '../lib/shard-states.js';

/** The public face of a node record; `owners` maps GPU index → the shard placed on it. */
export function toNodeView(n: NodeRecord, owners: ReadonlyMap<number, string>): NodeView {
  const gpus = n.inventory.gpus.map((g, i) => ({
    index: g.index,
    name: g.name,
    computeCapability: g.computeCapability,
    healthy: g.healthy,
    memoryTotalMb: g.memoryTotalMb,
    memoryUsedMb: n.gpuMemoryUsedMb[i] ?? g.memoryUsedMb,
    ...(owners.has(g.index) ? { shardId: owners.get(g.index) } : {}),
  }));
  const view: NodeView = {
    id: n.id,
    hostname: n.register.hostname,
    mgmtAddr: n.register.mgmtAddr,
    version: n.register.version,
    labels: { ...n.register.labels },
    connected: n.connected,
    inventory: {
      gpuCount: gpus.length,
      healthyGpuCount: gpus.filter((g) => g.healthy).length,
      driverVersion: n.inventory.driverVersion,
      cudaVersion: n.inventory.cudaVersion,
      hcaCount: n.inventory.hcas.length,
      warnings: [...n.inventory.warnings],
    },
    gpus,
    freeGpus: gpus.filter((g) => g.healthy && !owners.has(g.index)).map((g) => g.index),
    shards: [...n.shards].map(([shardId, s]) => ({ shardId, replicaId: s.replicaId, state: s.state, stateName: stateName(s.state) })),
  };
  if (n.connectedSince) view.connectedSince = n.connectedSince;
  if (n.disconnectedAt) view.disconnectedAt = n.disconnectedAt;
  if (n.lastHeartbeatAt) view.lastHeartbeatAt = n.lastHeartbeatAt;
  return view;
}
