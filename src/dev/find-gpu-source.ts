import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseQueryGpu } from '../agent/discovery/parse-query-gpu.js';
import { probeGpus } from '../agent/discovery/probe-gpus.js';
import { DEFAULT_FAKE_GPUS, fakeGpuDatasetDir } from '../sim/fake-nvidia-smi.js';

/** How long looking for real GPUs may take: a hung driver must not hold up a laptop demo. */
export const REAL_GPU_PROBE_TIMEOUT_MS = 5_000;

/** The fake box: the data set `bin/fake-nvidia-smi` answers from, and the sysfs tree that matches it. */
export const FAKE_GPU_DATASET = DEFAULT_FAKE_GPUS;
export const FAKE_NVIDIA_SMI = fileURLToPath(new URL('../../bin/fake-nvidia-smi', import.meta.url));
export const FAKE_SYSFS_ROOT = fileURLToPath(new URL(`../../fixtures/sysfs/${FAKE_GPU_DATASET}`, import.meta.url));

/** Where the dev agent's GPUs come from, and what the newcomer is told about it. */
export interface GpuSource {
  kind: 'real' | 'fake';
  /** discovery.nvidia_smi for the agent. */
  nvidiaSmi: string;
  /** discovery.sysfs_root for the agent. */
  sysfsRoot: string;
  /** Environment the agent needs on top of its own (the fake's data set). */
  env: Record<string, string>;
  gpuCount: number;
  /** The first GPU's name, e.g. "NVIDIA H100 80GB HBM3". */
  gpuName: string;
}

/**
 * Real GPUs when nvidia-smi lists any, else the fake 8-GPU box. The sim
 * engine does no GPU work either way; real GPUs only make the inventory the
 * control plane places on true.
 */
export async function findGpuSource(opts: { signal?: AbortSignal; nvidiaSmi?: string } = {}): Promise<GpuSource> {
  const probe = await probeGpus({ nvidiaSmi: opts.nvidiaSmi ?? 'nvidia-smi', sysfsRoot: '/', timeoutMs: REAL_GPU_PROBE_TIMEOUT_MS, signal: opts.signal });
  const healthy = probe.gpus.filter((g) => g.healthy);
  if (probe.driverAvailable && healthy.length > 0) {
    return { kind: 'real', nvidiaSmi: opts.nvidiaSmi ?? 'nvidia-smi', sysfsRoot: '/', env: {}, gpuCount: healthy.length, gpuName: healthy[0]?.name ?? '' };
  }
  return fakeGpuSource();
}

export function fakeGpuSource(): GpuSource {
  // Read from the data set itself, so the count can never disagree with what the agent will discover.
  const { gpus } = parseQueryGpu(readFileSync(`${fakeGpuDatasetDir(FAKE_GPU_DATASET)}/query-gpu.csv`, 'utf8'));
  return {
    kind: 'fake',
    nvidiaSmi: FAKE_NVIDIA_SMI,
    sysfsRoot: FAKE_SYSFS_ROOT,
    env: { LLMGW_FAKE_GPUS: FAKE_GPU_DATASET },
    gpuCount: gpus.length,
    gpuName: gpus[0]?.name ?? '',
  };
}

/** One line for the newcomer: which GPUs, and whether they are real. */
export function describeGpuSource(g: GpuSource): string {
  const what = `${g.gpuCount} × ${g.gpuName || 'GPU'}`;
  return g.kind === 'real'
    ? `${what} (real GPUs, found with ${g.nvidiaSmi}; the sim engine does no GPU work)`
    : `${what} (no GPUs here: a fake box, bin/fake-nvidia-smi with LLMGW_FAKE_GPUS=${FAKE_GPU_DATASET})`;
}
