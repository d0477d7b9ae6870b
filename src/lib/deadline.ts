/**
 * A time limit as an AbortSignal that is certain to fire.
 *
 * Not `AbortSignal.any([parent, AbortSignal.timeout(ms)])`: on Node 20 the
 * timeout signal's own timer holds it only weakly, and the combined signal
 * holds its sources weakly too, so once nothing else refers to the timeout
 * signal a garbage collection can take it before it fires
 * (nodejs/node#57736). The limit then never comes: a start waiting for its
 * model's pull with a 45 s startup_timeout had no status after 62 s (issue 36
 * item 9), and a probe of a hung engine waited for ever (http-probe.ts).
 *
 * Here a plain `setTimeout` holds the controller strongly until it fires or
 * `clear()` is called, so the limit holds whatever the collector does.
 *
 * The timer is referenced, not unref'd: while a deadline is pending it keeps
 * the process alive, so that whoever awaits the guarded work always hears
 * either the work's end or the deadline, never a silent exit with the await
 * unsettled (an unref'd timer lets a CLI exit 0 mid-wait when the work holds no
 * handle of its own). The price is that a deadline left uncleared keeps the
 * process up until it fires: call `clear()` in a `finally` as soon as the work
 * is done. A deadline also clears itself when it fires or a parent aborts, so
 * only the success path needs the `clear()`.
 */
export interface Deadline {
  /**
   * Aborted when the time runs out (reason: a `TimeoutError` DOMException,
   * as `AbortSignal.timeout` gives) or when any parent aborts (the parent's
   * reason), whichever comes first.
   */
  readonly signal: AbortSignal;
  /** True once the time ran out; false when a parent aborted first or the deadline was cleared. */
  readonly expired: boolean;
  /** Stops the timer and removes the listeners on the parents. Idempotent; the signal is not aborted by it. */
  clear(): void;
}

/**
 * A deadline `timeoutMs` from now, also ended by any of `parents` (undefined
 * entries are skipped, for optional caller signals). A parent already aborted
 * aborts the signal at once, and no timer is started.
 */
export function deadlineSignal(timeoutMs: number, ...parents: (AbortSignal | undefined)[]): Deadline {
  const controller = new AbortController();
  const sources = parents.filter((p): p is AbortSignal => p !== undefined);
  let expired = false;
  let timer: NodeJS.Timeout | undefined;
  const onParentAbort = (event: Event) => {
    const parent = event.target as AbortSignal;
    clear();
    controller.abort(parent.reason);
  };
  const clear = () => {
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
    for (const p of sources) p.removeEventListener('abort', onParentAbort);
  };
  const aborted = sources.find((p) => p.aborted);
  if (aborted) {
    controller.abort(aborted.reason);
  } else {
    for (const p of sources) p.addEventListener('abort', onParentAbort, { once: true });
    timer = setTimeout(() => {
      clear();
      expired = true;
      controller.abort(new DOMException(`the time limit of ${timeoutMs} ms ran out`, 'TimeoutError'));
    }, timeoutMs);
  }
  return {
    signal: controller.signal,
    get expired() {
      return expired;
    },
    clear,
  };
}
