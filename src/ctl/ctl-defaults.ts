/**
 * Defaults of ctl flags, in a module of their own so that commands can show
 * them in --help without loading the client (and its Connect runtime).
 */

/** `ctl logs` without -n. */
export const DEFAULT_CTL_LOG_LINES = 100;
/** `ctl drain --wait` without --timeout. */
export const DEFAULT_CTL_DRAIN_TIMEOUT_MS = 5 * 60_000;
