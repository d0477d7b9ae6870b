/**
 * SIGTERM and SIGINT, in one place. The first asks for an orderly stop (the
 * returned signal aborts); a second one means the operator will not wait, and
 * the process exits at once with 128 + the signal number. `onSecond` runs
 * just before that exit, synchronously: it is the last chance to kill what
 * must not outlive the process (`llmgw dev up`'s engines), and nothing
 * asynchronous it starts would ever finish.
 */
export function onShutdownSignals(
  onFirst?: (signal: NodeJS.Signals) => void,
  onSecond?: (signal: NodeJS.Signals) => void,
): { signal: AbortSignal; dispose: () => void } {
  const controller = new AbortController();
  const handler = (sig: NodeJS.Signals) => {
    if (controller.signal.aborted) {
      try {
        onSecond?.(sig);
      } finally {
        process.exit(128 + (sig === 'SIGINT' ? 2 : 15));
      }
    }
    onFirst?.(sig);
    controller.abort(new Error(`received ${sig}`));
  };
  process.on('SIGTERM', handler);
  process.on('SIGINT', handler);
  return {
    signal: controller.signal,
    dispose: () => {
      process.off('SIGTERM', handler);
      process.off('SIGINT', handler);
    },
  };
}
