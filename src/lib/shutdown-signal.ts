/** Exit status of a process ended by a second signal: 128 + the signal number, as shells report it. */
const FORCED_EXIT: Partial<Record<NodeJS.Signals, number>> = { SIGINT: 130, SIGTERM: 143 };

/**
 * An AbortSignal that aborts on the first SIGINT or SIGTERM, with the signal
 * name as its reason. A second signal exits at once: an operator pressing
 * Ctrl-C twice means it, and must never be stuck behind a slow shutdown.
 */
export function shutdownSignal(signals: readonly NodeJS.Signals[] = ['SIGINT', 'SIGTERM']): AbortSignal {
  const controller = new AbortController();
  const onSignal = (name: NodeJS.Signals) => {
    if (!controller.signal.aborted) {
      controller.abort(name);
      return;
    }
    process.exit(FORCED_EXIT[name] ?? 1);
  };
  for (const s of signals) process.on(s, onSignal);
  return controller.signal;
}
