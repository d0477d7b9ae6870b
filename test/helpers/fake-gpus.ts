import { readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT } from './run-cli.js';

/** The fake nvidia-smi that ships with the package (runs dist/, so the build must be current). */
export const FAKE_NVIDIA_SMI = join(REPO_ROOT, 'bin/fake-nvidia-smi');
export const GPU_FIXTURES = join(REPO_ROOT, 'fixtures/gpu');
export const SYSFS_FIXTURE = join(REPO_ROOT, 'fixtures/sysfs/hgx-h100x8');

/** A file of a GPU data set, e.g. gpuFixture('hgx-h100x8', 'topo-m.txt'). */
export function gpuFixture(dataset: string, file: string): string {
  return readFileSync(join(GPU_FIXTURES, dataset, file), 'utf8');
}

/** Pids of live processes whose environment contains `marker` (children keep the env they were started with). */
export function processesWithEnvMarker(marker: string): number[] {
  const out: number[] = [];
  for (const entry of readdirSafe('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/environ`, 'latin1').includes(marker)) out.push(Number(entry));
    } catch {
      // Gone meanwhile, or not ours.
    }
  }
  return out;
}

function readdirSafe(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

/**
 * The GPUs of the fake 8-GPU box (hgx-h100x8) a shard may start on. GPUs 3
 * and 4 show 71480 MiB used by no listed process (the data set's "leaked
 * context"), which the agent refuses at validation; tests that are not about
 * that use these.
 */
export const FREE_FAKE_GPUS: readonly number[] = [0, 1, 2, 5, 6, 7];

/** The n-th free GPU of the fake box, wrapping round. */
export function freeFakeGpu(n: number): number {
  return FREE_FAKE_GPUS[n % FREE_FAKE_GPUS.length] as number;
}

/**
 * Replaces a fake GPU data-set file whole (a rename): its readers (the fake
 * nvidia-smi's loop, the fake NVML, the scan) read it at any moment, and one
 * that opened it between a writeFileSync's truncate and its write read no
 * header (the loop exited 2 and was logged "stopped" with that reason, seen
 * on a loaded machine).
 */
export function replaceDataSetFile(path: string, text: string): void {
  writeFileSync(`${path}.new`, text);
  renameSync(`${path}.new`, path);
}
