import { clone, create, equals } from '@bufbuild/protobuf';
import { type Inventory, InventorySchema } from '../gen/llmgw/v1/agent_pb.js';
import { errorMessage } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';
import { readInventoryCache, writeInventoryCache } from './inventory-cache.js';

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
}

/**
 * The node's hardware as last scanned, rescanned every interval: GPUs appear
 * after boot, ports go down, and the control plane places by what this says.
 */
export class InventoryWatcher {
  private inventory: Inventory = create(InventorySchema, {});
  private scanning: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly opts: InventoryWatcherOptions) {}

  current(): Inventory {
    return this.inventory;
  }

  /**
   * Resolves once there is an inventory to register with, then rescans every
   * interval until stop(); `signal` ends a scan under way.
   */
  async start(signal: AbortSignal): Promise<void> {
    const cached = readInventoryCache(this.opts.stateDir);
    if (cached) {
      // Register now with what this node was a moment ago; the fresh scan
      // runs alongside and is sent as an update if anything changed.
      this.inventory = cached;
      void this.rescan(signal);
    } else {
      await this.rescan(signal);
    }
    if (signal.aborted) return;
    this.timer = setInterval(() => void this.rescan(signal), this.opts.intervalMs);
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
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

  private async scan(signal: AbortSignal): Promise<void> {
    const log = this.opts.logger;
    try {
      const next = await this.opts.discover(signal);
      if (signal.aborted) return;
      const changed = !equals(InventorySchema, comparable(next), comparable(this.inventory));
      this.inventory = next;
      if (!changed) return;
      for (const w of next.warnings) log.warn({ warning: w }, 'discovery');
      writeInventoryCache(this.opts.stateDir, next).catch((err: unknown) =>
        log.debug({ err: errorMessage(err) }, 'cannot cache the inventory; the next start scans in full'),
      );
      log.info({ gpus: next.gpus.length, hcas: next.hcas.length }, 'hardware changed; sending the new inventory');
      this.opts.onChange(next);
    } catch (err) {
      if (signal.aborted) return; // shutting down: nothing failed
      log.warn({ err: errorMessage(err) }, 'rediscovery failed; keeping the last inventory');
    }
  }
}

/** The inventory without readings that change every second, for change detection. */
function comparable(inv: Inventory): Inventory {
  const c = clone(InventorySchema, inv);
  for (const g of c.gpus) g.memoryUsedMb = 0;
  c.processes = [];
  return c;
}
