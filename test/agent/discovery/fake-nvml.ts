import { execFileSync } from 'node:child_process';
import { existsSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { inject } from 'vitest';

const SOURCE = fileURLToPath(new URL('../../../fixtures/nvml/fake-nvml.c', import.meta.url));
const GPU_DATASETS = fileURLToPath(new URL('../../../fixtures/gpu', import.meta.url));

/** `current`: driver 570's entry points; `old`: an old driver's, without the optional ones. */
export type FakeNvmlVariant = 'current' | 'old';

/** Why the fake library cannot be built here, or undefined when it can. */
export function fakeNvmlUnavailable(): string | undefined {
  try {
    execFileSync('cc', ['--version'], { stdio: 'ignore' });
    return undefined;
  } catch {
    return 'no C compiler (cc) on PATH to build the fake libnvidia-ml.so';
  }
}

/**
 * Builds fixtures/nvml/fake-nvml.c into a shared library once per run and
 * variant, in the run's own folder (test/global-setup.ts makes it and
 * removes it at the end: kept in /tmp by a hash of its source and checkout,
 * one was left behind by every run from a new clone), and returns its path.
 * Test files run in parallel workers: each writes its own temporary file
 * and renames it into place, so no worker loads a half-written library.
 */
export function buildFakeNvml(variant: FakeNvmlVariant = 'current'): string {
  const out = join(inject('suiteBuildDir'), `fake-nvml-${variant}.so`);
  if (existsSync(out)) return out;
  const tmp = `${out}.${process.pid}.tmp`;
  const defines = [`-DLLMGW_FIXTURES_GPU_DIR="${GPU_DATASETS}"`];
  if (variant === 'old') defines.push('-DLLMGW_FAKE_NVML_OLD_DRIVER');
  execFileSync('cc', ['-shared', '-fPIC', '-O2', '-Wall', ...defines, '-o', tmp, SOURCE], { stdio: ['ignore', 'ignore', 'inherit'] });
  renameSync(tmp, out);
  return out;
}
