/**
 * The data sets bin/fake-nvidia-smi answers from: directories of files in
 * nvidia-smi's own formats under fixtures/gpu (the script's header lists
 * them), chosen with LLMGW_FAKE_GPUS by name or absolute path.
 */
import { isAbsolute, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const DEFAULT_FAKE_GPUS = 'hgx-h100x8';
export const FAKE_GPU_DATASETS_DIR = fileURLToPath(new URL('../../fixtures/gpu', import.meta.url));

/** Where a data set lives: a name under fixtures/gpu, or an absolute directory. */
export function fakeGpuDatasetDir(nameOrDir: string = DEFAULT_FAKE_GPUS): string {
  return isAbsolute(nameOrDir) ? nameOrDir : join(FAKE_GPU_DATASETS_DIR, nameOrDir);
}
