/** Bytes as an operator reads them, in the units the config takes: 512 B, 1.5 KiB, 97.7 KiB, 12 MiB, 244 GiB. */
export function formatBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 ? v : Number(v.toFixed(v < 100 ? 1 : 0))} ${units[i]}`;
}
