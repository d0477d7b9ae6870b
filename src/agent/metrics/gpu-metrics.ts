import { Counter, Gauge, type Registry } from 'prom-client';
import { type GpuEvent, GpuEventKind } from '../../gen/llmgw/v1/agent_pb.js';
import { FAULT_XIDS, NVLINK_XID } from '../discovery/xid-catalogue.js';

/** MiB (what nvidia-smi and NVML's MB readings are) in bytes: Prometheus wants base units. */
const MIB = 1024 * 1024;

/**
 * The labels that join a series with NVIDIA's dcgm-exporter: its GPU
 * template writes `gpu` (the index), `UUID` and `pci_bus_id`
 * (internal/pkg/rendermetrics/render_metrics.go, gpuMetricsFormat, at
 * 1f7abdb7; `UUID` is `uuid` only with its old-namespace flag), so
 * `llmgw_gpu_healthy * on(UUID) group_left DCGM_FI_DEV_FB_USED` needs no
 * relabelling.
 */
export const GPU_LABELS = ['gpu', 'UUID', 'pci_bus_id'] as const;

/** One GPU as the metrics show it, read when scraped. */
export interface GpuMetricsView {
  index: number;
  uuid: string;
  pciBusId: string;
  /** The latest reading, MiB. */
  memoryUsedMb: number;
  memoryTotalMb: number;
  healthy: boolean;
  /** The health watch's unresolved fault; absent when none (a GPU may still be unhealthy by discovery). */
  fault?: { kind: GpuEventKind; xid: number; source: string };
  /** Why sound hardware takes no shard (memory used by no process the agent sees); absent when it does. */
  refusal?: string;
}

/**
 * The (kind, xid) label pairs of every fault the health watch can raise: each
 * GPU's series of them exist at 0 before its first fault (walkthrough 4, O2).
 * Born at 1, `increase()` never saw a GPU's first fault of a kind, and the
 * GPU-event alert stayed green. The clearing kinds (cleared, reset,
 * cleared_by_operator) and the applications' Xids (13, 31, 43, …: said, not
 * held against the GPU) are no faults, so they appear with their first event.
 */
export const FAULT_EVENT_LABELS: readonly { kind: string; xid: string }[] = [
  ...[...FAULT_XIDS].filter((x) => x !== NVLINK_XID).map((x) => ({ kind: 'xid', xid: String(x) })),
  { kind: 'nvlink_down', xid: String(NVLINK_XID) },
  ...['ecc_double_bit', 'row_remap_pending', 'row_remap_failure', 'gpu_lost', 'nvlink_down'].map((kind) => ({ kind, xid: '0' })),
];

/** A GpuEventKind as a label value: "xid", "ecc_double_bit", "gpu_lost", "cleared". */
export function gpuEventKindLabel(kind: GpuEventKind): string {
  return (GpuEventKind[kind] ?? String(kind)).toLowerCase();
}

function gpuLabels(g: Pick<GpuMetricsView, 'index' | 'uuid' | 'pciBusId'>) {
  return { gpu: String(g.index), UUID: g.uuid, pci_bus_id: g.pciBusId };
}

/**
 * Per GPU: memory used and total in bytes, health 0/1 with the fault on an
 * `_info` series that exists only while the GPU is faulted, and the health
 * watch's events counted by kind and Xid, each fault's series born at 0. Read from `gpus()` at each scrape,
 * so a GPU that leaves the inventory leaves the gauges; event counts stay
 * (a counter that vanished would read as a reset).
 */
export class GpuMetrics {
  /** Events by GPU, kind and Xid: the label sets the health watch has produced, a few per GPU. */
  private readonly events = new Map<string, { index: number; uuid: string; kind: string; xid: string; count: number }>();

  constructor(registry: Registry, gpus: () => GpuMetricsView[]) {
    const registers = [registry];
    const labelNames = [...GPU_LABELS];
    new Gauge({
      name: 'llmgw_gpu_memory_used_bytes',
      help: 'GPU memory used, from the latest reading (nvidia-smi or NVML).',
      labelNames,
      registers,
      collect() {
        this.reset();
        for (const g of gpus()) this.set(gpuLabels(g), g.memoryUsedMb * MIB);
      },
    });
    new Gauge({
      name: 'llmgw_gpu_memory_total_bytes',
      help: 'GPU memory in all, as discovery read it.',
      labelNames,
      registers,
      collect() {
        this.reset();
        for (const g of gpus()) this.set(gpuLabels(g), g.memoryTotalMb * MIB);
      },
    });
    new Gauge({
      name: 'llmgw_gpu_healthy',
      help: '1 when the GPU is fit for shards (discovery and the health watch agree), 0 when not; why is on llmgw_gpu_fault_info.',
      labelNames,
      registers,
      collect() {
        this.reset();
        // Fit for shards: sound, and not refused (foreign memory), as StartShard and ctl status judge it.
        for (const g of gpus()) this.set(gpuLabels(g), g.healthy && g.refusal === undefined ? 1 : 0);
      },
    });
    new Gauge({
      name: 'llmgw_gpu_fault_info',
      help: "A GPU's unresolved fault, by kind (xid, ecc_double_bit, row_remap_failure, gpu_lost, ..., discovery, or foreign_memory: sound but refused), Xid and source; present only while the GPU is unfit for shards.",
      labelNames: [...labelNames, 'kind', 'xid', 'source'],
      registers,
      collect() {
        this.reset();
        for (const g of gpus()) {
          if (g.healthy && g.refusal !== undefined) {
            this.set({ ...gpuLabels(g), kind: 'foreign_memory', xid: '0', source: 'agent' }, 1);
            continue;
          }
          if (g.healthy) continue;
          const f = g.fault;
          const fault = f ? { kind: gpuEventKindLabel(f.kind), xid: String(f.xid), source: f.source } : { kind: 'discovery', xid: '0', source: 'discovery' };
          this.set({ ...gpuLabels(g), ...fault }, 1);
        }
      },
    });
    const events = this.events;
    new Counter({
      name: 'llmgw_gpu_events_total',
      help: 'GPU health events the agent saw (NVML, kernel log, poll), by kind and Xid (0 when the kind has none).',
      labelNames: [...labelNames, 'kind', 'xid'],
      registers,
      collect() {
        this.reset();
        const now = gpus();
        const pci = new Map(now.map((g) => [g.index, g.pciBusId]));
        for (const g of now) {
          for (const l of FAULT_EVENT_LABELS) if (!events.has(eventKey(g.index, g.uuid, l.kind, l.xid))) this.inc({ ...gpuLabels(g), ...l }, 0);
        }
        for (const e of events.values()) {
          this.inc({ gpu: String(e.index), UUID: e.uuid, pci_bus_id: pci.get(e.index) ?? '', kind: e.kind, xid: e.xid }, e.count);
        }
      },
    });
  }

  /** One event of the GPU health watch. */
  count(e: GpuEvent): void {
    const kind = gpuEventKindLabel(e.kind);
    const xid = String(e.xid);
    const key = eventKey(e.gpuIndex, e.gpuUuid, kind, xid);
    const known = this.events.get(key);
    if (known) known.count += 1;
    else this.events.set(key, { index: e.gpuIndex, uuid: e.gpuUuid, kind, xid, count: 1 });
  }
}

function eventKey(index: number, uuid: string, kind: string, xid: string): string {
  return `${index}\0${uuid}\0${kind}\0${xid}`;
}
