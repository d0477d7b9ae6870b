import { abortableSleep } from '../lib/abortable-sleep.js';

/**
 * A token bucket shared by all downloads of one process (models.bandwidth):
 * a pull must not take the link the control-plane stream and the engines'
 * traffic share. A burst of one second's worth is allowed.
 */
export class BandwidthLimiter {
  private tokens: number;
  private lastMs = Date.now();

  constructor(private readonly bytesPerSecond: number | undefined) {
    this.tokens = bytesPerSecond ?? 0;
  }

  /** Whether a rate is set: without one, a download need not ask (take resolves at once). */
  get limited(): boolean {
    return this.bytesPerSecond !== undefined;
  }

  /** Resolves once `bytes` may be written. */
  async take(bytes: number, signal: AbortSignal): Promise<void> {
    const rate = this.bytesPerSecond;
    if (rate === undefined) return;
    for (;;) {
      const now = Date.now();
      this.tokens = Math.min(rate, this.tokens + ((now - this.lastMs) * rate) / 1000);
      this.lastMs = now;
      if (this.tokens >= bytes || this.tokens >= rate) {
        this.tokens -= bytes;
        return;
      }
      await abortableSleep(Math.ceil(((Math.min(bytes, rate) - this.tokens) * 1000) / rate), signal);
      signal.throwIfAborted();
    }
  }
}
