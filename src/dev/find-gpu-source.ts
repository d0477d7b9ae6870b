import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseQueryGpu } from '../agent/discovery/parse-query-gpu.js';
import { probeGpus } from '../agent/discovery/probe-gpus.js';
import { usageError } from '../lib/errors.js';
import { nearestName } from '../lib/nearest-name.js';
import { DEFAULT_FAKE_GPUS, FAKE_GPU_DATASETS_DIR, fakeGpuDatasetDir } from '../sim/fake-gpu-datasets.js';

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
  /** The fake's data set (LLMGW_FAKE_GPUS); absent for real GPUs. */
  dataset?: string;
}

/**
 * The fake data set LLMGW_FAKE_GPUS names (the variable bin/fake-nvidia-smi
 * reads), or undefined when it is unset or empty. Set, it is the operator
 * asking for those fakes, so dev up uses them even on a machine with GPUs:
 * ignoring it without a word ran 8 healthy H100s when `fault` (4 GPUs, 2
 * unhealthy) was asked for (new-operator walkthrough 2, row 14).
 */
export function fakeGpusFromEnv(env: NodeJS.ProcessEnv = process.env): string | undefined {
  return env.LLMGW_FAKE_GPUS || undefined;
}

/**
 * The data set LLMGW_FAKE_GPUS names when it is set, else real GPUs when
 * nvidia-smi lists any, else the fake 8-GPU box. The sim engine does no GPU
 * work either way; real GPUs only make the inventory the control plane
 * places on true.
 */
export async function findGpuSource(opts: { signal?: AbortSignal; nvidiaSmi?: string; env?: NodeJS.ProcessEnv } = {}): Promise<GpuSource> {
  const asked = fakeGpusFromEnv(opts.env);
  if (asked) return fakeGpuSource(asked);
  const probe = await probeGpus({ nvidiaSmi: opts.nvidiaSmi ?? 'nvidia-smi', sysfsRoot: '/', timeoutMs: REAL_GPU_PROBE_TIMEOUT_MS, signal: opts.signal });
  const healthy = probe.gpus.filter((g) => g.healthy);
  if (probe.driverAvailable && healthy.length > 0) {
    return { kind: 'real', nvidiaSmi: opts.nvidiaSmi ?? 'nvidia-smi', sysfsRoot: '/', env: {}, gpuCount: healthy.length, gpuName: healthy[0]?.name ?? '' };
  }
  return fakeGpuSource();
}

/** The data sets under fixtures/gpu, for the error that refuses any other name. */
export function knownFakeGpuDatasets(): string[] {
  try {
    return readdirSync(FAKE_GPU_DATASETS_DIR)
      .filter((name) => existsSync(join(FAKE_GPU_DATASETS_DIR, name, 'query-gpu.csv')))
      .sort();
  } catch {
    return [];
  }
}

/**
 * The fake box of data set `dataset` (a name under fixtures/gpu or an
 * absolute directory). One that does not exist is a usage error listing the
 * known ones: the fake nvidia-smi would answer "No devices were found",
 * which reads like a driver problem.
 */
export function fakeGpuSource(dataset: string = FAKE_GPU_DATASET): GpuSource {
  const file = `${fakeGpuDatasetDir(dataset)}/query-gpu.csv`;
  if (!existsSync(file)) {
    const near = nearestName(dataset, knownFakeGpuDatasets());
    throw usageError(
      `LLMGW_FAKE_GPUS=${dataset}: no such fake GPU data set${near ? ` (did you mean ${near}?)` : ''}; the known ones are ${knownFakeGpuDatasets().join(', ')} (fixtures/gpu), or give an absolute directory holding query-gpu.csv`,
    );
  }
  // Read from the data set itself, so the count can never disagree with what the agent will discover.
  const { gpus } = parseQueryGpu(readFileSync(file, 'utf8'));
  return {
    kind: 'fake',
    nvidiaSmi: FAKE_NVIDIA_SMI,
    // The one sysfs tree there is (HCAs, NUMA, network); discovery matches GPUs to it by PCI id and
    // leaves out what it does not find, so it serves every data set.
    sysfsRoot: FAKE_SYSFS_ROOT,
    env: { LLMGW_FAKE_GPUS: dataset },
    gpuCount: gpus.length,
    gpuName: gpus[0]?.name ?? '',
    dataset,
  };
}

/** One line for the newcomer: which GPUs, and whether they are real. */
export function describeGpuSource(g: GpuSource): string {
  const what = `${g.gpuCount} × ${g.gpuName || 'GPU'}`;
  return g.kind === 'real'
    ? `${what} (real GPUs, found with ${g.nvidiaSmi}; the sim engine does no GPU work)`
    : `${what} (${g.dataset && g.dataset !== FAKE_GPU_DATASET ? 'fake GPUs' : 'no GPUs here: a fake box'}, bin/fake-nvidia-smi with LLMGW_FAKE_GPUS=${g.dataset ?? FAKE_GPU_DATASET})`;
}
