import { RateLimitedLog } from '../../lib/rate-limited-log.js';
import { EventEmitter } from 'node:events';
import { type Gpu, type GpuEvent, GpuEventKind } from '../../gen/llmgw/v1/agent_pb.js';
import { type Logger, silentLogger } from '../../lib/logger.js';
import { type GpuFault, GpuFaultLedger } from './gpu-fault-ledger.js';
import { KmsgReader } from './kmsg-reader.js';
import type { WatchedGpu } from './watched-gpu.js';
import {
  describeDoubleBitEcc,
  describeXid,
  FAULT_XIDS,
  GPU_LOST_MESSAGE,
  kmsgPciOf,
  LOST_XIDS,
  NVLINK_XID,
  parseKmsgXid,
  ROW_REMAP_FAILURE_MESSAGE,
  ROW_REMAP_PENDING_MESSAGE,
} from '../discovery/xid-catalogue.js';
import { NVML_ERROR_GPU_IS_LOST, NVML_EVENT_DOUBLE_BIT_ECC, NVML_NVLINK_MAX_LINKS, NVML_EVENT_XID_CRITICAL, type NvmlEventSet, type NvmlLibrary } from '../discovery/nvml/nvml-library.js';

export interface GpuHealthWatchOptions {
  /** Open NVML: events and the poll. Without it only the kernel log is read. */
  nvml?: NvmlLibrary;
  /** The GPUs; read from NVML when omitted. */
  gpus?: readonly WatchedGpu[];
  /** discovery.kmsg; "" reads no kernel log. */
  kmsgPath: string;
  /** discovery.interval: how often ECC counts, remapped rows and lost GPUs are polled. */
  pollIntervalMs: number;
  /** Bound of one NVML event wait: close() waits at most this long for a pending one. */
  eventWaitMs?: number;
  /** How often the kernel log is looked at. */
  kmsgPollMs?: number;
  /** The shards on a GPU now, for GpuEvent.shard_ids. */
  shardsOn?: (gpuIndex: number) => string[];
  logger?: Logger;
}

const DEFAULT_EVENT_WAIT_MS = 100;
/** After an event wait fails (not a timeout), the next one waits this long. */
const WAIT_RETRY_MS = 1000;

type Events = { event: [GpuEvent] };

/**
 * The GPUs' health while the agent runs, from three sources: NVML events
 * (Xid critical errors, double-bit ECC), waited for on a worker thread with
 * a short timeout so close() is prompt; a poll every discovery.interval of
 * ECC counts, remapped rows and lost GPUs; and the kernel log's NVRM Xid
 * lines, because NVML does not deliver every Xid.
 *
 * Emits 'event' with a GpuEvent at once for every fault and for every fault
 * that clears (CLEARED). A lost GPU (NVML_ERROR_GPU_IS_LOST, Xid 79) stays
 * lost until it is reset: NVML's nvmlReturn_t says GPU_IS_LOST is "the GPU
 * has fallen off the bus or has otherwise become inaccessible", and NVIDIA's
 * Xid catalogue gives "reset the GPU" (or reboot) as Xid 79's remedy, so a
 * GPU NVML called lost that answers again under the same UUID, or that
 * comes back into the inventory under the same UUID, has been reset: every
 * fault it had is cleared (RESET). Other Xid faults need a reset too, which
 * the agent cannot tell from NVML; they last until an operator clears them
 * (`ctl gpu clear`, clearByOperator: CLEARED_BY_OPERATOR) or the agent
 * restarts. ECC, row-remap and NVLink-down faults clear when the poll reads
 * the GPU clean (an NVLink is down when one that was active at start is not).
 *
 * The GPU set follows the inventory (setGpus): a GPU that appears is
 * watched, one that goes is no longer polled.
 *
 * The agent wires it: `faultOf(i)` refuses StartShards on GPU i and marks
 * its shards UNHEALTHY with `describeFault(i)`; `markInventory(gpus)`
 * writes healthy/error into the next Inventory.
 */
export class GpuHealthWatch extends EventEmitter<Events> {
  readonly #opts: GpuHealthWatchOptions;
  readonly #log: Logger;
  readonly #gpus = new Map<number, WatchedGpu>();
  /** Per GPU, unresolved faults and recent events (gpu-fault-ledger.ts). */
  readonly #ledger: GpuFaultLedger;
  /** The GPUs the last setGpus (or start) gave, and the UUID each GPU had when it left the inventory. */
  #known = new Map<number, WatchedGpu>();
  readonly #gone = new Map<number, string>();
  #set: NvmlEventSet | undefined;
  #waiting: Promise<void> | undefined;
  #pollTimer: NodeJS.Timeout | undefined;
  #kmsg: KmsgReader | undefined;
  /** Kernel-log Xids not counted, said at most once a minute each (a forger could flood the log otherwise). */
  readonly #kmsgDoubts: RateLimitedLog;
  #closed = false;
  #started = false;
  /** Per GPU, the NVLinks that were active when the watch started: one that goes inactive is down. */
  readonly #linksAtStart = new Map<number, number[]>();
  /** Event waits that ended in a timeout: the thread-count test reads it. */
  waitTimeouts = 0;

  constructor(opts: GpuHealthWatchOptions) {
    super();
    this.#opts = opts;
    this.#log = opts.logger ?? silentLogger;
    this.#kmsgDoubts = new RateLimitedLog(this.#log);
    this.#ledger = new GpuFaultLedger({
      logger: this.#log,
      uuidOf: (index) => this.#gpus.get(index)?.uuid ?? '',
      shardsOn: (index) => this.#opts.shardsOn?.(index) ?? [],
      onEvent: (event) => this.emit('event', event),
    });
  }

  /** Starts every source there is; a missing source is logged once and the others run. */
  async start(): Promise<void> {
    if (this.#started || this.#closed) return;
    this.#started = true;
    const nvml = this.#opts.nvml;
    for (const g of this.#opts.gpus ?? this.#gpusFromNvml()) this.#gpus.set(g.index, g);
    this.#known = new Map(this.#gpus);
    this.#discoveryFaults([...this.#gpus.values()]);

    if (nvml) {
      for (const index of this.#gpus.keys()) this.#linksAtStart.set(index, activeLinks(nvml, index));
      const set = nvml.createEventSet(NVML_EVENT_XID_CRITICAL | NVML_EVENT_DOUBLE_BIT_ECC);
      if (set.ok) {
        this.#set = set.value.set;
        this.#waiting = this.#waitLoop(nvml);
      } else {
        this.#log.warn({ err: set.reason }, 'NVML events unavailable: GPU faults come from the poll and the kernel log only');
      }
      this.poll();
      this.#pollTimer = setInterval(() => this.poll(), this.#opts.pollIntervalMs).unref();
    }
    if (this.#opts.kmsgPath !== '') {
      this.#kmsg = new KmsgReader({ path: this.#opts.kmsgPath, onLine: (l) => this.#kmsgLine(l), pollMs: this.#opts.kmsgPollMs, logger: this.#log });
      await this.#kmsg.start();
    }
  }

  /** Stops every source; resolves once no NVML wait is pending and the event set is freed. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#pollTimer);
    await Promise.all([this.#waiting, this.#kmsg?.close()]);
    if (this.#set !== undefined) this.#opts.nvml?.freeEventSet(this.#set);
    this.#set = undefined;
  }

  /**
   * The GPUs to watch now, after an inventory rescan: a new one is watched
   * (its NVLinks as they are now), one that went is no longer polled. Its
   * faults are kept while it is gone; one that comes back under the same
   * UUID after being lost has been reset (RESET), one with another UUID at
   * the same index is another card, and starts clean.
   */
  setGpus(gpus: readonly WatchedGpu[]): void {
    if (this.#closed) return;
    const now = new Map(gpus.map((g) => [g.index, g]));
    for (const [index, old] of this.#gpus) {
      if (now.has(index)) continue;
      this.#gpus.delete(index);
      this.#log.warn({ gpu: index, uuid: old.uuid }, 'GPU no longer in the inventory; its health is not watched until it returns');
    }
    for (const [index, g] of now) {
      const old = this.#gpus.get(index);
      if (old && old.uuid === g.uuid && old.pciBusId === g.pciBusId) continue;
      // A lost GPU's UUID cannot be read, so a scan while it is lost lists
      // it with none: the card it was, still lost, not another card. Taken
      // for another, its faults were dropped without a word and the reset
      // that followed was never reported.
      if (old && g.uuid === '') continue;
      const returning = this.#gone.get(index);
      this.#gpus.set(index, g);
      this.#gone.delete(index);
      if (this.#opts.nvml) this.#linksAtStart.set(index, activeLinks(this.#opts.nvml, index));
      if (old) {
        // Another card at the same index: the old one's faults are not its own.
        if (old.uuid !== g.uuid) this.#ledger.forget(index);
        continue;
      }
      this.#log.info({ gpu: index, uuid: g.uuid }, 'GPU in the inventory; watching its health');
      if (returning !== undefined && returning !== g.uuid) {
        this.#ledger.forget(index);
      } else if (this.#ledger.has(index, 'lost')) {
        this.#ledger.clearAll(index, GpuEventKind.RESET, 'GPU reset: it is back in the inventory under the same UUID', 'poll');
      }
    }
    for (const [index, old] of this.#known) if (!now.has(index)) this.#gone.set(index, old.uuid);
    this.#known = new Map(now);
    this.#discoveryFaults(gpus);
  }

  /**
   * A scan's word on the GPUs it still lists, at every scan (changed or not):
   * a fault the scan reads is held again after `ctl gpu clear` (the next
   * reading judges a cleared GPU), and one it no longer reads is cleared.
   */
  judgeScan(gpus: readonly WatchedGpu[]): void {
    if (!this.#closed) this.#discoveryFaults(gpus.filter((g) => this.#gpus.get(g.index)?.uuid === g.uuid));
  }

  /**
   * Without NVML nothing polls the GPUs: a fault the scan (nvidia-smi) reads
   * is this watch's fault like any other, logged, an event, its shards
   * UNHEALTHY, and cleared by the scan or an operator (walkthrough 3, item 4).
   */
  #discoveryFaults(gpus: readonly WatchedGpu[]): void {
    if (this.#opts.nvml) return;
    for (const g of gpus) {
      if (g.discoveryFault) this.#ledger.raise(g.index, 'discovery', { kind: GpuEventKind.GPU_LOST, xid: 0, message: g.discoveryFault, source: 'discovery' });
      else this.#ledger.clear(g.index, 'discovery', 'discovery');
    }
  }

  /**
   * `ctl gpu clear`: forgets every fault of the GPU (an operator who reset it
   * or judged it sound) and emits CLEARED_BY_OPERATOR saying who and why.
   * The messages of the faults cleared; [] when it had none (no event then).
   */
  clearByOperator(gpuIndex: number, by: string): string[] {
    return this.#ledger.clearAll(gpuIndex, GpuEventKind.CLEARED_BY_OPERATOR, `cleared by ${by}`, 'operator');
  }

  /** The GPU's latest unresolved fault, or undefined when it is healthy. */
  faultOf(gpuIndex: number): GpuFault | undefined {
    return this.#ledger.faultOf(gpuIndex);
  }

  /** "GPU 3: Xid 79: GPU has fallen off the bus": for ShardStatus.error and StartShard refusals. */
  describeFault(gpuIndex: number): string | undefined {
    const f = this.faultOf(gpuIndex);
    return f ? `GPU ${gpuIndex}: ${f.message}` : undefined;
  }

  /** Writes each GPU's health into an Inventory's GPUs: a fault the watch knows overrides discovery's "healthy". */
  markInventory(gpus: Gpu[]): void {
    for (const gpu of gpus) {
      const f = this.faultOf(gpu.index);
      if (!f) continue;
      gpu.healthy = false;
      gpu.error = gpu.error && !gpu.error.includes(f.message) ? `${f.message}; ${gpu.error}` : f.message;
    }
  }

  /** The last events of a GPU, oldest first, for `ctl status`. */
  recentEvents(gpuIndex: number): GpuEvent[] {
    return this.#ledger.recentEvents(gpuIndex);
  }

  /** One poll of ECC counts, remapped rows and lost GPUs; runs every pollIntervalMs. */
  poll(): void {
    const nvml = this.#opts.nvml;
    if (!nvml || this.#closed) return;
    for (const index of this.#gpus.keys()) {
      const mem = nvml.memory(index);
      const ecc = nvml.doubleBitEccErrors(index);
      // Either call will do: an old driver has no memory _v2 and answers "not supported" to it, lost GPU or not.
      if ([mem, ecc].some((r) => !r.ok && r.code === NVML_ERROR_GPU_IS_LOST)) {
        this.#ledger.lostByNvml.add(index);
        this.#ledger.raise(index, 'lost', { kind: GpuEventKind.GPU_LOST, xid: 0, message: GPU_LOST_MESSAGE, source: 'poll' });
        continue;
      }
      if (this.#ledger.has(index, 'lost')) {
        // Lost as NVML said, answering again as the same GPU: it was reset.
        // A lost fault only the kernel log reported, with NVML answering all
        // along, is not taken back by NVML's word: the operator clears it.
        const uuid = nvml.uuid(index);
        const same = uuid.ok && (this.#gpus.get(index)?.uuid ?? '') === uuid.value;
        if (this.#ledger.lostByNvml.has(index) && same) this.#ledger.clearAll(index, GpuEventKind.RESET, 'GPU reset: NVML answers for it again under the same UUID', 'poll');
        continue;
      }
      if (ecc.ok) {
        if (ecc.value > 0) this.#ledger.raise(index, 'ecc', { kind: GpuEventKind.ECC_DOUBLE_BIT, xid: 0, message: describeDoubleBitEcc(ecc.value), source: 'poll' });
        else this.#ledger.clear(index, 'ecc', 'poll');
      }
      const rows = nvml.remappedRows(index);
      if (rows.ok) {
        if (rows.value.failure) this.#ledger.raise(index, 'remap-failure', { kind: GpuEventKind.ROW_REMAP_FAILURE, xid: 0, message: ROW_REMAP_FAILURE_MESSAGE, source: 'poll' });
        else this.#ledger.clear(index, 'remap-failure', 'poll');
        if (rows.value.pending) this.#ledger.raise(index, 'remap-pending', { kind: GpuEventKind.ROW_REMAP_PENDING, xid: 0, message: ROW_REMAP_PENDING_MESSAGE, source: 'poll' });
        else this.#ledger.clear(index, 'remap-pending', 'poll');
      }
      const wanted = this.#linksAtStart.get(index) ?? [];
      if (wanted.length > 0) {
        const now = new Set(activeLinks(nvml, index));
        const down = wanted.filter((l) => !now.has(l));
        if (down.length > 0) {
          const message = `NVLink ${down.length === 1 ? 'link' : 'links'} ${down.join(', ')} down (${wanted.length - down.length} of ${wanted.length} active)`;
          this.#ledger.raise(index, 'nvlink', { kind: GpuEventKind.NVLINK_DOWN, xid: 0, message, source: 'poll' });
        } else this.#ledger.clear(index, 'nvlink', 'poll');
      }
    }
  }

  async #waitLoop(nvml: NvmlLibrary): Promise<void> {
    const waitMs = this.#opts.eventWaitMs ?? DEFAULT_EVENT_WAIT_MS;
    let failedOnce = false;
    while (!this.#closed && this.#set !== undefined) {
      const r = await nvml.waitEvent(this.#set, waitMs);
      if (this.#closed) return;
      if (!r.ok) {
        // A lost GPU can fail the wait itself: the poll finds out which one.
        if (r.code === NVML_ERROR_GPU_IS_LOST) this.poll();
        else if (!failedOnce) this.#log.warn({ err: r.reason }, 'NVML event wait failed; retrying');
        failedOnce = true;
        await new Promise((resolve) => setTimeout(resolve, Math.min(WAIT_RETRY_MS, waitMs * 10)).unref());
        continue;
      }
      failedOnce = false;
      if (r.value === undefined) {
        this.waitTimeouts++;
        continue;
      }
      const { gpuIndex, type, data } = r.value;
      if (gpuIndex < 0) continue;
      if (type & NVML_EVENT_XID_CRITICAL) this.#xid(gpuIndex, data, 'nvml');
      else if (type & NVML_EVENT_DOUBLE_BIT_ECC) {
        const count = nvml.doubleBitEccErrors(gpuIndex);
        this.#ledger.raise(gpuIndex, 'ecc', {
          kind: GpuEventKind.ECC_DOUBLE_BIT,
          xid: 0,
          message: describeDoubleBitEcc(count.ok && count.value > 0 ? count.value : 1),
          source: 'nvml',
        });
      }
    }
  }

  #kmsgLine(line: string): void {
    const x = parseKmsgXid(line);
    if (!x) return;
    const gpu = [...this.#gpus.values()].find((g) => kmsgPciOf(g.pciBusId) === x.pci);
    if (!gpu) {
      this.#kmsgDoubts.warn({ pci: x.pci, xid: x.xid }, 'kernel log reports an Xid for a PCI device that is no GPU of this node');
      return;
    }
    const nvml = this.#opts.nvml;
    if (nvml && this.#set !== undefined) {
      // NVML reports this node's Xids itself (its event set), and its word wins over the kernel log, into which
      // any local user can get a line that reads as the driver's (security review 3, S7). A lost GPU is asked of NVML.
      const mem = nvml.memory(gpu.index);
      if (!mem.ok && mem.code === NVML_ERROR_GPU_IS_LOST) {
        this.poll();
        return;
      }
      this.#kmsgDoubts.warn(
        { gpu: gpu.index, xid: x.xid },
        'kernel log reports an Xid that NVML, which reports this node\'s Xids, did not: not counted (NVML answers for the GPU)',
      );
      return;
    }
    this.#xid(gpu.index, x.xid, 'kmsg');
  }

  #xid(index: number, xid: number, source: GpuFault['source']): void {
    const message = describeXid(xid);
    if (LOST_XIDS.has(xid)) {
      this.#ledger.raise(index, 'lost', { kind: GpuEventKind.XID, xid, message, source });
    } else if (xid === NVLINK_XID) {
      this.#ledger.raise(index, `xid:${xid}`, { kind: GpuEventKind.NVLINK_DOWN, xid, message, source });
    } else if (FAULT_XIDS.has(xid)) {
      this.#ledger.raise(index, `xid:${xid}`, { kind: GpuEventKind.XID, xid, message, source });
    } else {
      // The application's fault, not the GPU's: said, not held against the GPU.
      this.#ledger.emit(index, { kind: GpuEventKind.XID, xid, message, source, at: new Date() });
    }
  }

  #gpusFromNvml(): WatchedGpu[] {
    const nvml = this.#opts.nvml;
    if (!nvml) return [];
    const out: WatchedGpu[] = [];
    for (let i = 0; i < nvml.gpuCount; i++) {
      const uuid = nvml.uuid(i);
      const bus = nvml.pciBusId(i);
      out.push({ index: i, uuid: uuid.ok ? uuid.value : '', pciBusId: bus.ok ? bus.value : '' });
    }
    return out;
  }
}

/** The GPU's active NVLinks; [] when it has none or NVML does not say. */
function activeLinks(nvml: NvmlLibrary, index: number): number[] {
  const links: number[] = [];
  for (let link = 0; link < NVML_NVLINK_MAX_LINKS; link++) {
    const r = nvml.nvLinkActive(index, link);
    if (!r.ok) break;
    if (r.value) links.push(link);
  }
  return links;
}
