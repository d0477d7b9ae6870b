import type { Inventory } from '../../gen/llmgw/v1/agent_pb.js';
import type { Logger } from '../../lib/logger.js';
import type { FabricAttachmentConfig } from '../config/agent-config.js';
import { assembleInventory } from './assemble-inventory.js';
import type { NvmlLibrary } from './nvml/nvml-library.js';
import { mergeNvmlTopology, probeGpusBySource } from './probe-gpus-by-source.js';
import { probeHcas } from './probe-hcas.js';
import { probeNetwork } from './probe-network.js';
import { probeTopology } from './probe-topology.js';

export interface DiscoverOptions {
  /** nvidia-smi executable: a name looked up on PATH, or a path. */
  nvidiaSmi: string;
  /** Root under which /sys is read; "/" except in tests. */
  sysfsRoot: string;
  /** Limit for each external command (config discovery.timeout, default 10s). */
  timeoutMs: number;
  /** HCA → fabric, from config only. */
  fabrics: readonly FabricAttachmentConfig[];
  /** discovery.prefer_nvml: GPUs through NVML, nvidia-smi the fallback. */
  preferNvml?: boolean;
  /** discovery.nvml_library. */
  nvmlLibrary?: string;
  /** An NVML the agent keeps open across rediscoveries; opened and closed per call without it. */
  nvml?: NvmlLibrary;
  signal?: AbortSignal;
  logger?: Logger;
}

/**
 * Reads the node's hardware into an Inventory. Never throws for hardware
 * problems: they become Inventory.warnings, so a node without a driver still
 * registers and says why it is useless. Throws only when `signal` aborts.
 *
 * GPUs, HCAs and network are probed at once; topology waits for the GPU
 * probe, because a driver that did not answer once will not answer topo -m
 * either and would cost a second timeout.
 */
export async function discover(opts: DiscoverOptions): Promise<Inventory> {
  const base = { nvidiaSmi: opts.nvidiaSmi, timeoutMs: opts.timeoutMs, signal: opts.signal, logger: opts.logger };
  const [bySource, hcas, network] = await Promise.all([
    probeGpusBySource({ ...base, ...gpuSourceOptions(opts), sysfsRoot: opts.sysfsRoot }),
    probeHcas({ sysfsRoot: opts.sysfsRoot, fabrics: opts.fabrics, logger: opts.logger }),
    probeNetwork({ sysfsRoot: opts.sysfsRoot }),
  ]);
  const gpus = bySource.gpus;
  let topology = gpus.driverAvailable && gpus.gpus.length > 0 ? await probeTopology(base) : undefined;
  if (bySource.nvmlLinks) topology = mergeNvmlTopology(bySource.nvmlLinks, topology);
  return assembleInventory({ gpus, topology, hcas, network });
}

/** NVML is preferred unless the caller says otherwise, as discovery.prefer_nvml defaults to true. */
export function gpuSourceOptions(opts: DiscoverOptions): { preferNvml: boolean; nvmlLibrary: string; nvml?: NvmlLibrary } {
  return { preferNvml: opts.preferNvml ?? true, nvmlLibrary: opts.nvmlLibrary ?? 'libnvidia-ml.so.1', nvml: opts.nvml };
}
