/**
 * Resolves after `ms`, or at once when `signal` aborts; never rejects, and
 * leaves no timer or listener behind (unlike timers/promises, whose abort
 * rejects, which every caller here would only swallow).
 */
export function abortableSleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}
