import { create } from '@bufbuild/protobuf';
import { type Gpu, GpuSchema } from '../../gen/llmgw/v1/agent_pb.js';
import { cellMarker, isFaultMarker, parseMib, parseNvidiaCsv } from './parse-nvidia-csv.js';

/** What discovery asks `nvidia-smi --query-gpu` for, in this order. */
export const GPU_QUERY_FIELDS = [
  'index',
  'uuid',
  'name',
  'pci.bus_id',
  'memory.total',
  'memory.used',
  'driver_version',
  'compute_cap',
  'mig.mode.current',
] as const;

/**
 * Fields an older nvidia-smi may not know (compute_cap arrived with driver
 * 510, MIG with 450). Discovery drops one when nvidia-smi rejects it instead
 * of losing every GPU over a column.
 */
export const OPTIONAL_GPU_FIELDS: readonly string[] = ['compute_cap', 'mig.mode.current'];

/** Without these a GPU cannot be placed or accounted for, so it is reported unhealthy. */
const ESSENTIAL_FIELDS = ['uuid', 'memory.total'] as const;

export interface ParsedQueryGpu {
  gpus: Gpu[];
  /** From the first row that has one; "" when not queried or not reported. */
  driverVersion: string;
}

/**
 * Turns `--query-gpu` CSV (with or without header and units) into Gpu
 * messages. A GPU whose cells carry a fault marker (`[GPU requires reset]`,
 * `[Unknown Error]`) or lack an essential value is kept with healthy=false
 * and the reason: a broken GPU an operator cannot see is worse than one
 * listed as broken. numa_node is -1 here; the probe fills it from sysfs.
 */
export function parseQueryGpu(text: string, fields?: readonly string[]): ParsedQueryGpu {
  const csv = parseNvidiaCsv(text, fields);
  const queried = new Set(csv.fields);
  const gpus: Gpu[] = [];
  let driverVersion = '';

  csv.lines.forEach((line, position) => {
    if (line.kind === 'stray') {
      const lost = strayGpu(line.text);
      if (lost) gpus.push(lost);
      return;
    }
    const c = line.cells;
    const value = (f: string) => {
      const v = c[f];
      return v === undefined || cellMarker(v) !== undefined ? '' : v;
    };
    const faults: string[] = [];
    for (const cell of Object.values(c)) {
      const marker = cellMarker(cell);
      if (marker !== undefined && isFaultMarker(marker) && !faults.includes(marker)) faults.push(marker);
    }
    for (const f of ESSENTIAL_FIELDS) {
      if (!queried.has(f)) continue;
      const cell = c[f] ?? '';
      const marker = cellMarker(cell);
      if (faults.length === 0 && (cell === '' || marker !== undefined)) {
        faults.push(`nvidia-smi reported no ${f}${marker ? ` ([${marker}])` : ''}`);
      }
    }
    const index = Number.parseInt(value('index'), 10);
    if (driverVersion === '' && value('driver_version') !== '') driverVersion = value('driver_version');
    gpus.push(
      create(GpuSchema, {
        index: Number.isInteger(index) ? index : position,
        uuid: value('uuid'),
        name: value('name'),
        computeCapability: value('compute_cap'),
        memoryTotalMb: parseMib(c['memory.total'] ?? '') ?? 0,
        memoryUsedMb: parseMib(c['memory.used'] ?? '') ?? 0,
        pciBusId: value('pci.bus_id'),
        numaNode: -1,
        healthy: faults.length === 0,
        error: faults.join('; '),
        migMode: value('mig.mode.current'),
      }),
    );
  });
  return { gpus, driverVersion };
}

/**
 * A line such as "Unable to determine the device handle for GPU
 * 0000:5D:00.0: Unknown Error": the GPU exists (it has a bus id) but the
 * driver has lost it. It has no index nvidia-smi would accept, hence -1.
 * Lines that name no bus id are not GPUs and are left out.
 */
function strayGpu(text: string): Gpu | undefined {
  // Other stray text (a driver banner, "No devices were found") names no GPU.
  const bus = /\b([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\b/.exec(text);
  if (!bus) return undefined;
  return create(GpuSchema, {
    index: -1,
    pciBusId: bus[1] as string,
    numaNode: -1,
    healthy: false,
    error: text,
  });
}
