import type { Logger } from '../../lib/logger.js';

/** A connection's one timer: `arm` (re)starts it, and when it fires the connection is destroyed with `why` logged. */
export function closeWhenIdle(log: Logger, destroy: () => void): { arm: (ms: number, why: string) => void; clear: () => void } {
  let timer: NodeJS.Timeout | undefined;
  return {
    arm(ms, why) {
      clearTimeout(timer);
      timer = setTimeout(() => {
        log.debug(why);
        destroy();
      }, ms);
      timer.unref();
    },
    clear: () => clearTimeout(timer),
  };
}
