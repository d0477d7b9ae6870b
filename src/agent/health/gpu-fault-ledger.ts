import { create } from '@bufbuild/protobuf';
import { timestampNow } from '@bufbuild/protobuf/wkt';
import { type GpuEvent, GpuEventKind, GpuEventSchema } from '../../gen/llmgw/v1/agent_pb.js';
import type { Logger } from '../../lib/logger.js';

/**
 * The GPU health watch's book of faults (gpu-health-watch.ts): per GPU, the
 * unresolved faults and the last events, and the GpuEvent that every fault
 * raised or cleared emits. The watch's sources decide what is a fault; this
 * records it, says it once, and answers for it.
 */

/** One unresolved fault of a GPU. */
export interface GpuFault {
  kind: GpuEventKind;
  xid: number;
  /** The operator's sentence: "Xid 79: GPU has fallen off the bus". */
  message: string;
  source: 'nvml' | 'kmsg' | 'poll' | 'operator' | 'discovery';
  at: Date;
}

/** Events kept per GPU for `ctl status`. */
const RECENT_EVENTS = 10;

export interface GpuFaultLedgerOptions {
  logger: Logger;
  /** The GPU's UUID as the watch knows it, for GpuEvent.gpu_uuid. */
  uuidOf: (gpuIndex: number) => string;
  /** The shards on a GPU now, for GpuEvent.shard_ids. */
  shardsOn: (gpuIndex: number) => string[];
  /** Called with every event, at once. */
  onEvent: (event: GpuEvent) => void;
}

export class GpuFaultLedger {
  readonly #opts: GpuFaultLedgerOptions;
  /** Per GPU, unresolved faults by key ("lost", "xid:79", "ecc", "remap-pending", "remap-failure"). */
  readonly #faults = new Map<number, Map<string, GpuFault>>();
  readonly #recent = new Map<number, GpuEvent[]>();
  /** GPUs whose 'lost' fault NVML itself confirmed (GPU_IS_LOST): one of them answering again has been reset. */
  readonly lostByNvml = new Set<number>();

  constructor(opts: GpuFaultLedgerOptions) {
    this.#opts = opts;
  }

  /** Whether the GPU holds the fault of this key. */
  has(index: number, key: string): boolean {
    return this.#faults.get(index)?.has(key) ?? false;
  }

  /** Drops a GPU's faults without a word: another card now has its index. */
  forget(index: number): void {
    this.#faults.delete(index);
    this.lostByNvml.delete(index);
  }

  /** The GPU's latest unresolved fault, or undefined when it is healthy. */
  faultOf(gpuIndex: number): GpuFault | undefined {
    const faults = this.#faults.get(gpuIndex);
    if (!faults || faults.size === 0) return undefined;
    return faults.get('lost') ?? [...faults.values()].sort((a, b) => b.at.getTime() - a.at.getTime())[0];
  }

  /** The last events of a GPU, oldest first, for `ctl status`. */
  recentEvents(gpuIndex: number): GpuEvent[] {
    return [...(this.#recent.get(gpuIndex) ?? [])];
  }

  /** Records a fault and emits it, unless the same fault is already held (NVML and the kernel log both report most Xids). */
  raise(index: number, key: string, f: Omit<GpuFault, 'at'>): void {
    const faults = this.#faults.get(index) ?? new Map<string, GpuFault>();
    this.#faults.set(index, faults);
    const held = faults.get(key);
    if (held && (held.message === f.message || key === 'lost')) return;
    const fault = { ...f, at: new Date() };
    faults.set(key, fault);
    this.#opts.logger.warn({ gpu: index, fault: fault.message, source: fault.source }, 'GPU fault');
    this.emit(index, fault);
  }

  clear(index: number, key: string, source: GpuFault['source']): void {
    const faults = this.#faults.get(index);
    const held = faults?.get(key);
    if (!faults || !held) return;
    faults.delete(key);
    this.#opts.logger.info({ gpu: index, fault: held.message }, 'GPU fault cleared');
    this.emit(index, { kind: GpuEventKind.CLEARED, xid: 0, message: `cleared: ${held.message}`, source, at: new Date() });
  }

  /** Forgets every fault of a GPU and emits one event of `kind` naming them; the messages cleared. */
  clearAll(index: number, kind: GpuEventKind, why: string, source: GpuFault['source']): string[] {
    const faults = [...(this.#faults.get(index)?.values() ?? [])];
    this.#faults.delete(index);
    this.lostByNvml.delete(index);
    if (faults.length === 0) return [];
    const cleared = faults.map((f) => f.message);
    this.#opts.logger.info({ gpu: index, cleared, why }, 'GPU faults cleared');
    this.emit(index, { kind, xid: 0, message: `${why}; cleared: ${cleared.join('; ')}`, source, at: new Date() });
    return cleared;
  }

  /** Emits an event (and keeps it among the GPU's recent ones); a fault not held, as an application's Xid, only this. */
  emit(index: number, f: GpuFault): void {
    const event = create(GpuEventSchema, {
      gpuIndex: index,
      gpuUuid: this.#opts.uuidOf(index),
      kind: f.kind,
      xid: f.xid,
      message: f.message,
      at: timestampNow(),
      source: f.source,
      shardIds: this.#opts.shardsOn(index),
    });
    const recent = this.#recent.get(index) ?? [];
    recent.push(event);
    if (recent.length > RECENT_EVENTS) recent.shift();
    this.#recent.set(index, recent);
    this.#opts.onEvent(event);
  }
}
