import { create } from '@bufbuild/protobuf';
import { parseCpuList } from '../../lib/cpu-list.js';
import { type GpuLink, GpuLinkSchema } from '../../gen/llmgw/v1/agent_pb.js';

export interface TopoMatrix {
  /** GPU-GPU pairs once each (GPU0-GPU1, never GPU1-GPU0), then GPU-HCA pairs. */
  links: GpuLink[];
  /** GPU index → NUMA node from the "NUMA Affinity" column, where it is one node. */
  gpuNuma: Map<number, number>;
  /** GPU index → its "CPU Affinity" cell ("0-55,112-167"), where it is a CPU list. */
  gpuCpus: Map<number, string>;
  /** "NIC0" → "mlx5_0", from the NIC legend. */
  nicNames: Map<string, string>;
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: stripping ANSI escapes is the point
const ANSI = /\u001b\[[0-9;?]*[A-Za-z]/g;
const GPU_LABEL = /^GPU(\d+)$/;

/**
 * Parses `nvidia-smi topo -m`. The format has drifted across drivers and
 * through copy-paste: ANSI underline around the header, tabs or spaces
 * (tab-expanded copies), NIC columns named NIC0… with a legend (newer) or by
 * device name (older), and an optional "GPU NUMA ID" column. What stays put:
 * the device columns come first, every matrix cell is one word, and rows
 * start with their device's label. Throws when no matrix is found, so the
 * caller reports "topology unavailable" rather than an empty topology.
 */
export function parseTopoMatrix(text: string): TopoMatrix {
  const lines = text.replace(ANSI, '').split(/\r?\n/);
  const headerAt = lines.findIndex((l) => /^\s*GPU\d+\b/.test(l) && /\t|\s{2,}/.test(l) && !/^\s*GPU\d+\s+(X|NV\d+|SYS|NODE|PHB|PXB|PIX|SOC)\b/.test(l));
  if (headerAt < 0) throw new Error('no GPU matrix header in nvidia-smi topo -m output');
  const headerTokens = (lines[headerAt] as string).trim().split(/\s+/);
  const devices: string[] = [];
  for (const t of headerTokens) {
    if (t === 'CPU' || t === 'NUMA' || t === 'GPU' || t === 'Affinity') break;
    devices.push(t);
  }
  const afterDevices = headerTokens.slice(devices.length).join(' ');
  const trailing = ['CPU Affinity', 'NUMA Affinity', 'GPU NUMA ID'].filter((c) => afterDevices.includes(c));

  const nicNames = new Map<string, string>();
  for (const l of lines) {
    const m = /^\s*(NIC\d+)\s*:\s*(\S+)\s*$/.exec(l);
    if (m) nicNames.set(m[1] as string, m[2] as string);
  }
  const nameOf = (label: string) => nicNames.get(label) ?? label;

  const cells = new Map<string, string[]>();
  const gpuNuma = new Map<number, number>();
  const gpuCpus = new Map<number, string>();
  for (const l of lines.slice(headerAt + 1)) {
    if (/^\s*Legend\s*:/.test(l)) break;
    const tokens = l.trim().split(/\s+/);
    const label = tokens[0];
    if (label === undefined || !devices.includes(label) || tokens.length < devices.length + 1) continue;
    cells.set(label, tokens.slice(1, devices.length + 1));
    const g = GPU_LABEL.exec(label);
    const numaAt = trailing.indexOf('NUMA Affinity');
    if (g && numaAt >= 0) {
      const numa = tokens[devices.length + 1 + numaAt];
      if (numa !== undefined && /^\d+$/.test(numa)) gpuNuma.set(Number(g[1]), Number(numa));
    }
    const cpusAt = trailing.indexOf('CPU Affinity');
    if (g && cpusAt >= 0) {
      const cpus = tokens[devices.length + 1 + cpusAt];
      if (cpus !== undefined && parseCpuList(cpus) !== undefined) gpuCpus.set(Number(g[1]), cpus);
    }
  }
  const gpus = devices.filter((d) => GPU_LABEL.test(d));
  if (gpus.length === 0 || !gpus.every((g) => cells.has(g))) {
    throw new Error('nvidia-smi topo -m output has a header but no complete GPU rows');
  }

  const links: GpuLink[] = [];
  const link = (a: string, b: string, connection: string) => {
    const nv = /^NV(\d+)$/.exec(connection);
    links.push(create(GpuLinkSchema, { a, b, connection, nvlinks: nv ? Number(nv[1]) : 0 }));
  };
  gpus.forEach((a, i) => {
    const row = cells.get(a) as string[];
    for (const b of gpus.slice(i + 1)) link(a, b, row[devices.indexOf(b)] as string);
  });
  for (const a of gpus) {
    const row = cells.get(a) as string[];
    devices.forEach((d, j) => {
      if (!GPU_LABEL.test(d)) link(a, nameOf(d), row[j] as string);
    });
  }
  return { links, gpuNuma, gpuCpus, nicNames };
}
