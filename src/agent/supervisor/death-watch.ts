import type { ChildProcess } from 'node:child_process';
import { type ProcessIdentity, checkIdentity } from '../../lib/process/process-identity.js';

/** How often an adopted engine (not our child: no exit event) is checked for being gone. The bound: at most every 500 ms. */
export const IDENTITY_POLL_MS = 500;

/** How an engine leader ended: with its status (our child), or only seen gone (adopted). */
export type DeathInfo = { known: true; code: number | null; signal: NodeJS.Signals | null } | { known: false; reason: string };

/**
 * Calls `onDeath` once when the engine leader is gone, until `signal` aborts.
 * Our own child reports its exit at once, with the status. An engine that is
 * not our child sends no event: it is checked by identity, so a pid reused
 * after its death reads as dead, not as alive.
 */
export function watchDeath(opts: {
  child?: ChildProcess;
  pid: number;
  identity: ProcessIdentity;
  signal: AbortSignal;
  onDeath: (info: DeathInfo) => void;
}): void {
  const { child, signal } = opts;
  if (signal.aborted) return;
  if (child) {
    const onExit = (code: number | null, sig: NodeJS.Signals | null) => opts.onDeath({ known: true, code, signal: sig });
    // It may have exited before the listener was attached.
    if (child.exitCode !== null || child.signalCode !== null) {
      opts.onDeath({ known: true, code: child.exitCode, signal: child.signalCode });
      return;
    }
    child.once('exit', onExit);
    signal.addEventListener('abort', () => child.off('exit', onExit), { once: true });
    return;
  }
  const timer = setInterval(() => {
    const check = checkIdentity(opts.pid, opts.identity);
    if (!check.alive) {
      clearInterval(timer);
      opts.onDeath({ known: false, reason: check.reason });
    }
  }, IDENTITY_POLL_MS);
  timer.unref();
  signal.addEventListener('abort', () => clearInterval(timer), { once: true });
}
