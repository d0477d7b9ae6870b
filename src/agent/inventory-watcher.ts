import { create, equals } from '@bufbuild/protobuf';
import { abortableSleep } from '../lib/abortable-sleep.js';
import { type Inventory, InventorySchema } from '../gen/llmgw/v1/agent_pb.js';
import { errorMessage } from '../lib/errors.js';
import { SerialWrites } from '../lib/files/serial-writes.js';
import type { Logger } from '../lib/logger.js';
import { sameLinks } from './connection/inventory-wire.js';
import { GpuProcessSightings } from './gpu-process-sightings.js';
import { ensureStateDir, readInventoryCache, writeInventoryCache } from './inventory-cache.js';

/** How long a first boot (no cache) waits for its hardware scan before registering without it. */
export const FIRST_SCAN_WAIT_MS = 5000;

export interface InventoryWatcherOptions {
  /** Reads the node's hardware; never throws for hardware problems. */
  discover: (signal: AbortSignal) => Promise<Inventory>;
  /** Where the last inventory is cached for the next start (inventory-cache.ts). */
  stateDir: string;
  /** Time between scans (discovery.interval). */
  intervalMs: number;
  logger: Logger;
  /** Called with a fresh inventory that differs from the last one in more than its readings. */
  onChange: (inventory: Inventory) => void;
  /**
   * Called with every scan's inventory, changed or not, before onChange: a
   * judgement of the readings (a GPU that still reads "requires reset" after
   * an operator cleared it) is made again at each scan, not only when the
   * inventory changes (walkthrough 4, O1).
   */
  onScan?: (inventory: Inventory) => void;
  /** Without a cache, how long start() waits for the first scan; FIRST_SCAN_WAIT_MS by default. */
  firstScanWaitMs?: number;
}

/**
 * The node's hardware as last scanned, rescanned every interval: GPUs appear
 * after boot, ports go down, and the control plane places by what this says.
 */
export class InventoryWatcher {
  private inventory: Inventory = create(InventorySchema, {});
  private scanning: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  /** A scan has succeeded in this process: its result, not a placeholder, is current. */
  private scanned = false;
  /** The cache on disk holds the current hardware (read from it, or written since). */
  private cacheCurrent = false;
  /** The scanned compute processes as they were when listed: which of them are gone since. */
  readonly processes = new GpuProcessSightings();
  private readonly cacheWrites: SerialWrites;

  constructor(private readonly opts: InventoryWatcherOptions) {
    this.cacheWrites = new SerialWrites((err) => opts.logger.debug({ err: errorMessage(err) }, 'cannot cache the inventory; the next start scans in full'));
  }

  current(): Inventory {
    return this.inventory;
  }

  /**
   * Resolves once there is an inventory to register with, then rescans every
   * interval until stop(); `signal` ends a scan under way.
   *
   * Register never waits on hardware once this node has been seen: with a
   * cache, it goes at once with the cached inventory and the fresh scan
   * follows as an Inventory update if anything changed. A slow check must not
   * delay registration: a busy driver's nvidia-smi takes seconds a call, and
   * the engines an agent restart adopts are reported only in Register.
   *
   * A truly first boot (no cache: a new node, or the first start of this
   * version) waits for its scan, but at most firstScanWaitMs (5 s). A healthy
   * nvidia-smi answers well within that, even on a loaded machine (a whole
   * `llmgw discover` took 2.8 s on 2 cores at load 16), so a normal first boot
   * registers once, with its GPUs, and the control plane never sees a
   * GPU-less node. It happens once in a node's life now that every scan is
   * cached, so the bound favours a complete first Register over speed. A
   * slow one registers at the bound with an empty inventory whose warning
   * says the scan is under way, and the inventory is sent when the scan ends:
   * engines left running by an older agent are reported seconds sooner, and
   * a control plane places nothing on a node with no GPUs listed meanwhile.
   */
  async start(signal: AbortSignal, opts: { rescanAfter?: Promise<void> } = {}): Promise<void> {
    const log = this.opts.logger;
    try {
      ensureStateDir(this.opts.stateDir);
    } catch (err) {
      log.warn({ err: errorMessage(err), dir: this.opts.stateDir }, 'cannot create the state directory; the inventory is not cached for the next start');
    }
    const cached = readInventoryCache(this.opts.stateDir);
    if (cached) {
      this.inventory = cached;
      this.cacheCurrent = true;
      // The fresh scan once `rescanAfter` says (the agent's first Register
      // out): its nvidia-smi costs the CPU that Register and the adopted
      // shards' READY are waiting for.
      if (opts.rescanAfter) void opts.rescanAfter.then(() => (signal.aborted ? undefined : this.rescan(signal)));
      else void this.rescan(signal);
    } else {
      const waitMs = this.opts.firstScanWaitMs ?? FIRST_SCAN_WAIT_MS;
      const inTime = await Promise.race([this.rescan(signal).then(() => true), abortableSleep(waitMs, signal).then(() => false)]);
      // `scanned` and not `inTime` alone: a scan that ended in the same tick
      // as the bound has set the real inventory, which must not be replaced.
      if (!inTime && !this.scanned && !signal.aborted) {
        const why = `the first hardware scan is still running after ${waitMs / 1000}s; the inventory follows when it ends`;
        log.warn({ waitMs }, 'registering before the first hardware scan ended; the inventory follows');
        this.inventory = create(InventorySchema, { warnings: [why] });
      }
    }
    if (signal.aborted) return;
    this.timer = setInterval(() => void this.rescan(signal), this.opts.intervalMs);
  }

  /** Ends the rescans; resolves once the cache write under way has ended (none starts after): the agent exits next. */
  stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    return this.cacheWrites.close();
  }

  /**
   * One scan at a time: a timer firing while nvidia-smi is still running (a
   * slow or hung driver, an interval shorter than the timeout) joins the scan
   * under way instead of starting another beside it.
   */
  rescan(signal: AbortSignal): Promise<void> {
    this.scanning ??= this.scan(signal).finally(() => {
      this.scanning = undefined;
    });
    return this.scanning;
  }

  /** Every scan's hardware is cached, not only a changed one: a write that failed once is retried. */
  private cache(inventory: Inventory): void {
    void this.cacheWrites.queue(async () => {
      await writeInventoryCache(this.opts.stateDir, inventory);
      this.cacheCurrent = true;
    });
  }

  private async scan(signal: AbortSignal): Promise<void> {
    const log = this.opts.logger;
    // Its processes are listed at some moment after this, and recorded only once the whole scan is done.
    const takenAt = performance.now();
    try {
      const next = await this.opts.discover(signal);
      if (signal.aborted) return;
      this.processes.record(next.processes, takenAt);
      // The same topology keeps its list, and with it the list's encoding for
      // the stream (inventory-wire.ts); compared by a plain loop, not by
      // reflection: 4,032 links for 64 GPUs.
      const sameTopology = sameLinks(next.links, this.inventory.links);
      if (sameTopology) next.links = this.inventory.links;
      const changed = !sameTopology || !equals(InventorySchema, comparable(next), comparable(this.inventory));
      this.inventory = next;
      this.scanned = true;
      if (changed || !this.cacheCurrent) this.cache(next);
      this.opts.onScan?.(next);
      if (!changed) return;
      for (const w of next.warnings) log.warn({ warning: w }, 'discovery');
      log.info({ gpus: next.gpus.length, hcas: next.hcas.length }, 'hardware changed; sending the new inventory');
      this.opts.onChange(next);
    } catch (err) {
      if (signal.aborted) return; // shutting down: nothing failed
      log.warn({ err: errorMessage(err) }, 'rediscovery failed; keeping the last inventory');
    }
  }
}

/**
 * The inventory without readings that change every second, for change
 * detection: a shallow copy that shares all but the GPUs' rows. A deep clone
 * of both inventories each rescan copied the topology too, N x N links (4,096
 * on a 64-GPU box), twice a minute for a comparison that only reads them.
 */
function comparable(inv: Inventory): Inventory {
  // Links are compared apart (sameLinks).
  return { ...inv, gpus: inv.gpus.map((g) => ({ ...g, memoryUsedMb: 0 })), processes: [], links: [] };
}
