import type { GpuLink } from '../../gen/llmgw/v1/agent_pb.js';
import { errorMessage } from '../../lib/errors.js';
import { type Logger, silentLogger } from '../../lib/logger.js';
import { parseTopoMatrix } from './parse-topo-matrix.js';
import { runNvidiaSmi } from './run-nvidia-smi.js';

export interface ProbeTopologyOptions {
  nvidiaSmi: string;
  timeoutMs: number;
  signal?: AbortSignal;
  logger?: Logger;
}

export interface TopologyProbe {
  links: GpuLink[];
  /** GPU index → NUMA node, from topo -m's "NUMA Affinity" column. */
  gpuNuma: Map<number, number>;
  /** GPU index → its CPUs ("0-55,112-167"), from topo -m's "CPU Affinity" column; absent when unknown. */
  gpuCpus?: Map<number, string>;
  warnings: string[];
}

/**
 * GPU-GPU and GPU-HCA links from `nvidia-smi topo -m`. It fails on some
 * machines (exit 255 on VMs and with a GPU off the bus); that is a warning,
 * "topology unavailable: <reason>", and the rest of discovery stands.
 */
export async function probeTopology(opts: ProbeTopologyOptions): Promise<TopologyProbe> {
  const log = opts.logger ?? silentLogger;
  const r = await runNvidiaSmi(opts.nvidiaSmi, ['topo', '-m'], { timeoutMs: opts.timeoutMs, signal: opts.signal });
  if (!r.ok) {
    log.warn({ err: r.reason }, 'topology unavailable');
    return { links: [], gpuNuma: new Map(), warnings: [`topology unavailable: ${r.reason}`] };
  }
  try {
    const m = parseTopoMatrix(r.stdout);
    return { links: m.links, gpuNuma: m.gpuNuma, gpuCpus: m.gpuCpus, warnings: [] };
  } catch (err) {
    return { links: [], gpuNuma: new Map(), warnings: [`topology unavailable: ${errorMessage(err)}`] };
  }
}
