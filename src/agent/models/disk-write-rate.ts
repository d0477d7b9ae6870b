import { errorMessage } from '../../lib/errors.js';
import type { Logger } from '../../lib/logger.js';
import { probeDiskWrite } from '../../models/disk-write-probe.js';
import { StoreLayout } from '../../models/store-layout.js';

/**
 * The probe waits this long after the agent's start: adopted engines settle
 * and the first starts launch first, and an agent that restarts in a loop
 * (a bad config) never writes at all.
 */
export const DISK_PROBE_DELAY_MS = 60_000;

/**
 * Measures the model store's durable write rate once, DISK_PROBE_DELAY_MS
 * after the agent's start (disk-write-probe.ts), and hands it to `onRate`;
 * a probe that fails is logged and not retried: the rate stays unmeasured.
 * Off every shard's path: a timer that does not hold the process, ended by
 * `signal`.
 */
export function measureDiskWriteLater(o: { cacheDir: string; signal: AbortSignal; logger: Logger; onRate: (bytes: number, ms: number) => void; delayMs?: number }): void {
  if (o.cacheDir === '' || o.signal.aborted) return;
  const timer = setTimeout(() => {
    o.signal.removeEventListener('abort', cancel);
    probeDiskWrite(new StoreLayout(o.cacheDir), o.signal).then(
      (r) => o.onRate(r.bytes, r.ms),
      (err: unknown) => {
        if (!o.signal.aborted) o.logger.warn({ dir: o.cacheDir, err: errorMessage(err) }, "could not measure the model store's disk write rate");
      },
    );
  }, o.delayMs ?? DISK_PROBE_DELAY_MS);
  timer.unref();
  const cancel = () => clearTimeout(timer);
  o.signal.addEventListener('abort', cancel, { once: true });
}
