/**
 * `nvidia-smi -L`: one line per GPU and, indented under it, one per MIG
 * device. MIG devices appear only here (and in -q), not in --query-gpu.
 *
 *   GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-…)
 *     MIG 3g.40gb     Device  0: (UUID: MIG-…)
 *     MIG 1c.3g.71gb  Device  1: (UUID: MIG-…)
 */
export interface ListedGpu {
  index: number;
  name: string;
  uuid: string;
  migDevices: { index: number; profile: string; uuid: string }[];
}

const GPU_LINE = /^GPU\s+(\d+):\s*(.*?)\s*\(UUID:\s*([^)\s]+)\s*\)\s*$/;
const MIG_LINE = /^MIG\s+(\S+)\s+Device\s+(\d+):\s*\(UUID:\s*([^)\s]+)\s*\)\s*$/;

export function parseGpuList(text: string): ListedGpu[] {
  const gpus: ListedGpu[] = [];
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    const g = GPU_LINE.exec(line);
    if (g) {
      gpus.push({ index: Number(g[1]), name: g[2] as string, uuid: g[3] as string, migDevices: [] });
      continue;
    }
    const m = MIG_LINE.exec(line);
    const owner = gpus[gpus.length - 1];
    if (m && owner) owner.migDevices.push({ profile: m[1] as string, index: Number(m[2]), uuid: m[3] as string });
  }
  return gpus;
}
