/** Most CPUs a list may name: more than any machine has, fewer than a crafted "0-4294967295" would make. */
const MAX_CPU = 1 << 16;

/**
 * The CPUs of a Linux CPU list ("0-55,112-167", as sysfs cpulist files,
 * `taskset -c` and nvidia-smi's CPU Affinity write them), sorted; undefined
 * when it is not one.
 */
export function parseCpuList(text: string): number[] | undefined {
  const t = text.trim();
  if (t === '') return [];
  const out = new Set<number>();
  for (const part of t.split(',')) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(part);
    if (!m) return undefined;
    const a = Number(m[1]);
    const b = m[2] === undefined ? a : Number(m[2]);
    if (b < a || b >= MAX_CPU) return undefined;
    for (let i = a; i <= b; i++) out.add(i);
  }
  return [...out].sort((x, y) => x - y);
}

/** `cpus` written back as a CPU list, runs joined: [0,1,2,5] → "0-2,5". */
export function formatCpuList(cpus: readonly number[]): string {
  const sorted = [...new Set(cpus)].sort((a, b) => a - b);
  const runs: string[] = [];
  for (let i = 0; i < sorted.length; ) {
    let j = i;
    while (j + 1 < sorted.length && (sorted[j + 1] as number) === (sorted[j] as number) + 1) j++;
    runs.push(i === j ? String(sorted[i]) : `${sorted[i]}-${sorted[j]}`);
    i = j + 1;
  }
  return runs.join(',');
}
