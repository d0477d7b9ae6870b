/**
 * GPU memory an engine double holds, where the fake nvidia-smi sees it: each
 * double writes one file `<pid>.csv` of lines `gpu_index,used_mib` into the
 * directory LLMGW_FAKE_GPU_USAGE_DIR names (given to the double as
 * --sim-gpu-usage-dir), and bin/fake-nvidia-smi adds every file's figures to
 * memory.used of its data set. So a double that sleeps (frees its memory)
 * shows it to the agent's GPU memory sampler the way NVML would.
 */
import { mkdirSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Records that this process holds `mib` on each of `gpus` (0 removes nothing: the file says 0). */
export function writeGpuUsage(dir: string, gpus: readonly number[], mib: number): void {
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${process.pid}.csv`);
  // Renamed into place: nvidia-smi reads these every interval and must never see half a file.
  writeFileSync(`${file}.tmp`, gpus.map((g) => `${g},${Math.round(mib)}\n`).join(''));
  renameSync(`${file}.tmp`, file);
}

/** This process holds nothing any more (it exits). */
export function clearGpuUsage(dir: string): void {
  rmSync(join(dir, `${process.pid}.csv`), { force: true });
}

/** MiB held per GPU index by every double writing into `dir` (or by the one file `only`); empty when there is none. */
export function readGpuUsage(dir: string | undefined, only?: string): Map<number, number> {
  const used = new Map<number, number>();
  if (!dir) return used;
  let names: string[];
  try {
    names = readdirSync(dir).filter((n) => n.endsWith('.csv') && (only === undefined || n === only));
  } catch {
    return used;
  }
  for (const name of names) {
    let text: string;
    try {
      text = readFileSync(join(dir, name), 'utf8');
    } catch {
      continue; // removed as its double exited
    }
    for (const line of text.split('\n')) {
      const [index, mib] = line.split(',').map((c) => Number(c.trim()));
      if (Number.isInteger(index) && Number.isFinite(mib)) used.set(index as number, (used.get(index as number) ?? 0) + (mib as number));
    }
  }
  return used;
}
