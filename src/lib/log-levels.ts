/**
 * The levels `--log-level` accepts. In a file of their own so that every
 * command's base class can offer the flag without loading pino, which a
 * command like `ctl status` never needs (cold start).
 */
export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;
