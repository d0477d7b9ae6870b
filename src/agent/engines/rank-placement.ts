import { readFileSync } from 'node:fs';
import type { Inventory, StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import { formatCpuList, parseCpuList } from '../../lib/cpu-list.js';
import { parallelism } from './shard-launch.js';

/*
 * Where a multi-node rank's CPUs and memory go (issue 40, item 4): start-up
 * is CPU-bound (weights read, deserialised, graphs captured: "Breaking the
 * Ice", MLSys 2026), and a rank whose threads run on the other socket from
 * its GPUs pays the cross-socket link for every copy. The node's topology
 * (`nvidia-smi topo -m`: each GPU's "CPU Affinity" and NUMA node) says where
 * its GPUs sit; the machine itself says which CPUs and NUMA nodes are online.
 */

/** What this machine has online: what an affinity may name (a fixture's GPUs may sit on CPUs this box lacks). */
export interface HostTopology {
  cpus: ReadonlySet<number>;
  numaNodes: ReadonlySet<number>;
}

/** The CPUs and NUMA node a rank is placed on, and the one line that says so (ctl status's note). */
export interface RankPlacement {
  /** CPU list for taskset -c / CPUAffinity=; absent: no CPU placement. */
  cpus?: string;
  /** NUMA node for NUMAPolicy=bind / NUMAMask=; absent: no memory placement. */
  numaNode?: number;
  /** "NUMA node 0, CPUs 0-55,112-167 (its GPUs' CPU affinity)", or why there is none. */
  why: string;
}

/** Online CPUs and NUMA nodes from sysfs (`root` for tests); empty sets when unreadable. */
export function readHostTopology(root = '/sys/devices/system'): HostTopology {
  const read = (path: string) => {
    try {
      return parseCpuList(readFileSync(path, 'utf8')) ?? [];
    } catch {
      return [];
    }
  };
  return { cpus: new Set(read(`${root}/cpu/online`)), numaNodes: new Set(read(`${root}/node/online`)) };
}

/**
 * The placement of a rank of a multi-node shard: the CPUs nearest all its
 * GPUs (the union of their CPU affinity) that are online here, and their
 * NUMA node when they share one that is online. Nothing for a shard on one
 * node, and nothing (with the reason) where the topology does not say.
 */
export function chooseRankPlacement(spec: StartShard, inventory: Inventory, host: HostTopology): RankPlacement | undefined {
  if (parallelism(spec).nnodes <= 1) return undefined;
  const gpus = spec.gpuIndices.map((i) => inventory.gpus.find((g) => g.index === i));
  if (gpus.length === 0 || gpus.some((g) => g === undefined)) return { why: 'no CPU or NUMA placement: the topology does not list every GPU of the rank' };
  const affinities = gpus.map((g) => parseCpuList(g?.cpuAffinity ?? '') ?? []);
  const nodes = new Set(gpus.map((g) => g?.numaNode ?? -1));
  const [node] = nodes;
  const numaNode = nodes.size === 1 && node !== undefined && node >= 0 && host.numaNodes.has(node) ? node : undefined;
  const numaWhy =
    numaNode !== undefined ? `NUMA node ${numaNode}` : nodes.size > 1 ? 'no NUMA binding (its GPUs sit on several NUMA nodes)' : node === undefined || node < 0 ? 'no NUMA binding (NUMA node unknown)' : `no NUMA binding (NUMA node ${node} is not online here)`;
  if (affinities.some((a) => a.length === 0)) return { ...(numaNode !== undefined ? { numaNode } : {}), why: `${numaWhy}; no CPU pinning (a GPU's CPU affinity is unknown)` };
  const wanted = [...new Set(affinities.flat())];
  const online = wanted.filter((c) => host.cpus.has(c));
  const given = formatCpuList(wanted);
  if (online.length === 0) return { ...(numaNode !== undefined ? { numaNode } : {}), why: `${numaWhy}; no CPU pinning (its GPUs' CPUs ${given} are not online here)` };
  const cpus = formatCpuList(online);
  return { cpus, ...(numaNode !== undefined ? { numaNode } : {}), why: `${numaWhy}, CPUs ${cpus}${cpus === given ? '' : ` (of its GPUs' ${given}, those online here)`}` };
}
