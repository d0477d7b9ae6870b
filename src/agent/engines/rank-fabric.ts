import type { Inventory, StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import { parallelism } from './shard-launch.js';

/*
 * Which HCAs a rank of a multi-node shard talks to its peers on (issue 40,
 * item 4). A rank whose NCCL or UCX picks an HCA on another PCIe switch than
 * its GPUs loses half its bandwidth (UCX #11259), and one whose HCA link is
 * down fails minutes into start-up (Mooncake #429). The node's topology
 * (`nvidia-smi topo -m`, in Inventory.links) says which HCA sits nearest
 * each GPU; its port states (sysfs, in Inventory.hcas) say whether it is up.
 */

/**
 * How near an HCA is to a GPU, as `nvidia-smi topo -m` names the path:
 * PIX (one PCIe bridge) nearest, SYS (across the CPU sockets) farthest.
 */
const NEARNESS = ['PIX', 'PXB', 'PHB', 'NODE', 'SYS'] as const;

/** What a rank's NCCL and UCX are given, and why; nothing for a shard on one node. */
export interface RankFabric {
  /** HCA names. */
  hcas: string[];
  /**
   * `name:port` of each active port: UCX_NET_DEVICES, and NCCL_IB_HCA as an
   * exact list (`=mlx5_0:1,mlx5_3:1`, nccl-selectors.ts): without the `=`,
   * NCCL would also use mlx5_10 and mlx5_11 for a chosen mlx5_1 (E13).
   */
  ucxDevices: string[];
}

export type RankFabricChoice = { fabric?: RankFabric } | { refused: string };

/**
 * The HCAs of this rank: those the control plane named (`hcas`), else, per
 * GPU of the shard, the HCAs at the nearest path the topology shows. Each
 * must have a port ACTIVE, or the start is refused naming it: a rank on a
 * down link fails minutes into its start. A shard on one node talks over
 * NVLink and shared memory: no choice, no refusal. A node whose topology
 * names no HCA near its GPUs leaves NCCL to choose, as before.
 */
export function chooseRankFabric(spec: StartShard, inventory: Inventory): RankFabricChoice {
  if (parallelism(spec).nnodes <= 1) return {};
  const named = spec.hcas.length > 0;
  const chosen = named ? spec.hcas.map((name) => ({ name, why: 'named in hcas' })) : nearestHcas(spec.gpuIndices, inventory);
  if (chosen.length === 0) return {};
  const ucxDevices: string[] = [];
  for (const { name: entry, why } of chosen) {
    // A named entry may keep one port (`mlx5_0:1`, as validation allows): only that port counts.
    const [name = entry, port] = entry.split(':');
    const ports = inventory.hcas.filter((h) => h.name === name && (port === undefined || h.port === Number(port)));
    const active = ports.filter((p) => p.state === 'ACTIVE');
    if (active.length === 0) {
      const state = ports.map((p) => `port ${p.port} ${p.state || 'unknown'}${p.physState ? ` (${p.physState})` : ''}`).join(', ') || 'no port';
      const remedy = named ? 'fix its link, or name another HCA in hcas' : 'fix its link, or name the HCAs to use in hcas';
      return { refused: `shard ${spec.shardId}: HCA ${entry} (${why}) has no active port: ${state}; a multi-node rank would start on it and fail minutes in; ${remedy}` };
    }
    for (const p of active) ucxDevices.push(`${name}:${p.port}`);
  }
  return { fabric: { hcas: [...new Set(chosen.map((c) => c.name.split(':')[0] ?? c.name))], ucxDevices } };
}

/** Per GPU, in the shard's order, the HCAs at its nearest path; each HCA once. */
function nearestHcas(gpus: readonly number[], inventory: Inventory): { name: string; why: string }[] {
  const hcaNames = new Set(inventory.hcas.map((h) => h.name));
  const out = new Map<string, string>();
  for (const gpu of gpus) {
    const me = `GPU${gpu}`;
    const paths = inventory.links.flatMap((l) => {
      const other = l.a === me ? l.b : l.b === me ? l.a : undefined;
      const rank = NEARNESS.indexOf(l.connection as (typeof NEARNESS)[number]);
      return other !== undefined && hcaNames.has(other) && rank >= 0 ? [{ name: other, rank, connection: l.connection }] : [];
    });
    const best = Math.min(...paths.map((p) => p.rank));
    for (const p of paths.filter((q) => q.rank === best)) if (!out.has(p.name)) out.set(p.name, `nearest GPU ${gpu}, ${p.connection}`);
  }
  return [...out].map(([name, why]) => ({ name, why }));
}
