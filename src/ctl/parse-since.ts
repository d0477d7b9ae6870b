import { DURATION_EXAMPLES, parseDuration } from '../lib/duration.js';
import { usageError } from '../lib/errors.js';

/** RFC 3339 as operators paste it: a date, a time, and a zone (Z or ±hh:mm); fractions allowed. */
const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[Zz]|[+-]\d{2}:\d{2})$/;

/**
 * `--since`: "10m" (that long before `nowMs`) or an RFC 3339 time, as ms
 * since the epoch. A time without a zone is refused rather than read as
 * local or UTC: the agent's clock and the operator's terminal may disagree.
 */
export function parseSince(text: string, nowMs: number): number {
  const ago = parseDuration(text);
  if (ago !== undefined) return nowMs - ago;
  if (RFC3339.test(text.trim())) {
    const ms = Date.parse(text.trim());
    if (!Number.isNaN(ms)) return ms;
  }
  throw usageError(`--since ${JSON.stringify(text)} is neither a duration nor an RFC 3339 time; ${DURATION_EXAMPLES}, or like 2026-12-02T02:31:00Z`);
}
