import { execFile } from 'node:child_process';

/**
 * Tells systemd about the service's state (Type=notify) through the
 * `systemd-notify` binary, so no native addon is needed. The unit sets
 * NotifyAccess=all, because the message comes from that child, not from us.
 * Does nothing outside systemd (no NOTIFY_SOCKET).
 */
export function sdNotify(state: string, env: NodeJS.ProcessEnv = process.env): Promise<boolean> {
  if (!env.NOTIFY_SOCKET) return Promise.resolve(false);
  return new Promise((resolve) => {
    execFile('systemd-notify', [`--pid=${process.pid}`, state], { timeout: 5000, env }, (err) => resolve(!err));
  });
}

/**
 * Starts WATCHDOG=1 pings at half the interval systemd asked for
 * (WATCHDOG_USEC), or nothing when it asked for none. Returns a stop function.
 * `healthy` is consulted before each ping: a wedged agent must stop pinging.
 */
export function startWatchdog(healthy: () => boolean, env: NodeJS.ProcessEnv = process.env): () => void {
  const usec = Number(env.WATCHDOG_USEC);
  if (!env.NOTIFY_SOCKET || !Number.isFinite(usec) || usec <= 0) return () => {};
  const pid = Number(env.WATCHDOG_PID);
  if (Number.isInteger(pid) && pid > 0 && pid !== process.pid) return () => {};
  const timer = setInterval(() => {
    if (healthy()) void sdNotify('WATCHDOG=1', env);
  }, Math.max(500, usec / 2000));
  timer.unref();
  return () => clearInterval(timer);
}
