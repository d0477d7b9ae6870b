import type { GpuLink } from '../../gen/llmgw/v1/agent_pb.js';
import { openGpuSource } from './open-gpu-source.js';
import { probeGpusNvml } from './nvml/probe-gpus-nvml.js';
import type { NvmlLibrary } from './nvml/nvml-library.js';
import { mergeGpuList } from './merge-gpu-list.js';
import { parseGpuList } from './parse-gpu-list.js';
import { fillNumaNodes, type GpuProbe, type ProbeGpusOptions, probeGpus } from './probe-gpus.js';
import type { TopologyProbe } from './probe-topology.js';
import { runNvidiaSmi } from './run-nvidia-smi.js';

const MEMORY_V2 = 'nvmlDeviceGetMemoryInfo_v2';

export interface GpuSourceOptions extends ProbeGpusOptions {
  preferNvml: boolean;
  nvmlLibrary: string;
  /** An NVML the caller keeps open (the agent); without it one is opened and closed for this probe. */
  nvml?: NvmlLibrary;
}

export interface GpuSourceProbe {
  gpus: GpuProbe;
  source: 'nvml' | 'nvidia-smi';
  /** Why this source: "NVML from libnvidia-ml.so.1", "NVML unavailable (...); falling back to nvidia-smi". */
  why: string;
  /** GPU-GPU links when NVML gave them; topo -m then adds only the GPU-HCA ones. */
  nvmlLinks?: GpuLink[];
}

/**
 * GPUs from NVML when it is preferred and works, else from nvidia-smi. NVML
 * has no entry point in the set llmgw uses for MIG devices, so `nvidia-smi
 * -L` still lists them when nvidia-smi is there; its absence costs only
 * the MIG list.
 */
export async function probeGpusBySource(opts: GpuSourceOptions): Promise<GpuSourceProbe> {
  const source = opts.nvml
    ? ({ kind: 'nvml', nvml: opts.nvml, why: `NVML from ${opts.nvml.path}` } as const)
    : openGpuSource({ preferNvml: opts.preferNvml, nvmlLibrary: opts.nvmlLibrary });
  // Memory is what placement needs most, and the v1 call counts the
  // driver's reservation as used: a driver without _v2 reads memory through
  // nvidia-smi, and so do the GPUs with it.
  if (source.kind === 'nvml' && !source.nvml.has(MEMORY_V2)) {
    if (!opts.nvml) source.nvml.close();
    const gpus = await probeGpus(opts);
    return { gpus, source: 'nvidia-smi', why: `NVML of this driver lacks ${MEMORY_V2}; reading GPUs through nvidia-smi` };
  }
  if (source.kind === 'nvidia-smi') {
    const gpus = await probeGpus(opts);
    // A node without the library says so in discover's source line and the
    // agent's log; a library that loads but fails is a broken driver, and
    // the Inventory says that too.
    if (source.nvmlBroken) gpus.warnings.unshift(`NVML unavailable (${source.nvmlError}): GPUs read through nvidia-smi`);
    return { gpus, source: 'nvidia-smi', why: source.why };
  }
  try {
    const probe = await probeGpusNvml(source.nvml);
    const gpus = probe.gpus.gpus;
    const [list] = await Promise.all([
      runNvidiaSmi(opts.nvidiaSmi, ['-L'], { timeoutMs: opts.timeoutMs, signal: opts.signal }),
      fillNumaNodes(gpus, opts.sysfsRoot),
    ]);
    if (list.ok) {
      mergeGpuList(gpus, parseGpuList(list.stdout));
    } else if (list.kind !== 'not-found') {
      probe.gpus.warnings.push(`MIG devices unknown: ${list.reason}`);
    }
    return { gpus: probe.gpus, source: 'nvml', why: source.why, nvmlLinks: probe.gpuLinks };
  } finally {
    if (!opts.nvml) source.nvml.close();
  }
}

/**
 * The topology when NVML gave the GPU-GPU links: those, then topo -m's
 * GPU-HCA links (NVML knows no HCA). A failed topo -m leaves the NVML links
 * standing and says what is missing.
 */
export function mergeNvmlTopology(nvmlLinks: GpuLink[], topo: TopologyProbe | undefined): TopologyProbe {
  const isGpu = (s: string) => /^GPU\d+$/.test(s);
  const hcaLinks = (topo?.links ?? []).filter((l) => isGpu(l.a) && !isGpu(l.b));
  const warnings = (topo?.warnings ?? []).map((w) => w.replace(/^topology unavailable/, 'GPU-HCA affinity unavailable'));
  return { links: [...nvmlLinks, ...hcaLinks], gpuNuma: topo?.gpuNuma ?? new Map(), gpuCpus: topo?.gpuCpus ?? new Map(), warnings };
}
