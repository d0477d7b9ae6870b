import type { Inventory } from '../../gen/llmgw/v1/agent_pb.js';

/** Closer first: how far a GPU is from an HCA over PCIe. */
const PCIE_DISTANCE: Record<string, number> = { PIX: 1, PXB: 2, PHB: 3, NODE: 4, SYS: 5, SOC: 5 };
const distance = (c: string) => (/^NV\d+$/.test(c) ? 0 : (PCIE_DISTANCE[c] ?? 9));

/**
 * One line an operator can check a box against: "8 GPUs, all pairs NV18;
 * GPU0-1 nearest HCA mlx5_0 (PXB), GPU2-3 nearest HCA mlx5_1 (PXB)". Mixed
 * GPU-GPU connections are counted ("NV12 ×2, SYS ×4"); GPUs with the same
 * nearest HCAs are grouped into ranges.
 */
export function summarizeTopology(inv: Inventory): string {
  const n = inv.gpus.length;
  if (n === 0) return 'no GPUs';
  const head = `${n} GPU${n === 1 ? '' : 's'}`;
  const isGpu = (s: string) => /^GPU\d+$/.test(s);
  const pairs = inv.links.filter((l) => isGpu(l.a) && isGpu(l.b));
  const toHca = inv.links.filter((l) => isGpu(l.a) && !isGpu(l.b));
  if (inv.links.length === 0) return n === 1 ? head : `${head}, topology unknown`;

  const parts: string[] = [];
  const counts = new Map<string, number>();
  for (const p of pairs) counts.set(p.connection, (counts.get(p.connection) ?? 0) + 1);
  if (counts.size === 1) parts.push(`all pairs ${[...counts.keys()][0]}`);
  else if (counts.size > 1) {
    parts.push(
      [...counts.entries()]
        .sort((a, b) => distance(a[0]) - distance(b[0]) || a[0].localeCompare(b[0]))
        .map(([c, k]) => `${c} ×${k}`)
        .join(', '),
    );
  }
  let line = parts.length > 0 ? `${head}, ${parts.join(', ')}` : head;

  // Per GPU: the HCAs at the shortest distance.
  const nearest: { gpu: number; key: string }[] = [];
  const gpuLabels = [...new Set(toHca.map((l) => l.a))].sort((a, b) => Number(a.slice(3)) - Number(b.slice(3)));
  for (const label of gpuLabels) {
    const mine = toHca.filter((l) => l.a === label);
    const best = Math.min(...mine.map((l) => distance(l.connection)));
    const at = mine.filter((l) => distance(l.connection) === best);
    nearest.push({ gpu: Number(label.slice(3)), key: `${at.map((l) => l.b).join(',')} (${at[0]?.connection})` });
  }
  const groups: string[] = [];
  for (let i = 0; i < nearest.length; ) {
    let j = i;
    while (j + 1 < nearest.length && nearest[j + 1]?.key === nearest[i]?.key && nearest[j + 1]?.gpu === (nearest[j]?.gpu ?? 0) + 1) j++;
    const first = nearest[i] as { gpu: number; key: string };
    const last = nearest[j] as { gpu: number; key: string };
    groups.push(`GPU${first.gpu}${last.gpu !== first.gpu ? `-${last.gpu}` : ''} nearest HCA ${first.key}`);
    i = j + 1;
  }
  if (groups.length > 0) line += `; ${groups.join(', ')}`;
  return line;
}
