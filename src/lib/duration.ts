/**
 * Durations as operators write them in config ("500ms", "5s", "2m", "1h30m"),
 * as milliseconds in code.
 */

import { usageError } from './errors.js';

const UNIT_MS: Record<string, number> = {
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

const DURATION = /^(?:\d+(?:\.\d+)?(?:ms|s|m|h))+$/;
const PART = /(\d+(?:\.\d+)?)(ms|s|m|h)/g;

/** Parses "1h30m", "500ms", "2.5s"; undefined when the text is not a duration. */
export function parseDuration(text: string): number | undefined {
  const s = text.trim();
  if (s === '0') return 0;
  if (!DURATION.test(s)) return undefined;
  let ms = 0;
  for (const [, n, unit] of s.matchAll(PART)) {
    ms += Number(n) * (UNIT_MS[unit as string] as number);
  }
  return Math.round(ms);
}

/** How every duration error ends, so that flags and config say it alike. */
export const DURATION_EXAMPLES = 'write it like 500ms, 5s or 2m';

/**
 * The longest wait a Node timer keeps: setTimeout takes a longer delay as
 * 1 ms (with a TimeoutOverflowWarning), so `--timeout 1000h` would time out
 * at once. 2^31-1 ms is 596h31m23.647s.
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * A duration given on the command line as `name` (e.g. "--timeout"), or a
 * usage error in the one wording every command uses: what was given, and how
 * to write it. With `positive`, zero is refused as well: a timeout of 0s is a
 * duration, but one that could never be met.
 */
export function parseDurationArg(name: string, text: string, opts: { positive?: boolean } = {}): number {
  const ms = parseDuration(text);
  if (ms === undefined) throw usageError(`${name} ${JSON.stringify(text)} is not a duration; ${DURATION_EXAMPLES}`);
  if (opts.positive && ms <= 0) throw usageError(`${name} must be more than 0, got ${JSON.stringify(text)}`);
  // Every duration flag is a timer's delay; a longer one would fire at once (MAX_TIMER_MS).
  if (ms > MAX_TIMER_MS) throw usageError(`${name} ${JSON.stringify(text)} is longer than a timer can wait; give at most 596h`);
  return ms;
}

/** Renders milliseconds the way config writes them: 1500 → "1.5s", 120000 → "2m". */
export function formatDuration(ms: number): string {
  if (ms === 0) return '0s';
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000}h`;
  if (ms % 60_000 === 0) return `${ms / 60_000}m`;
  if (ms >= 1000) return `${Number((ms / 1000).toFixed(3))}s`;
  return `${ms}ms`;
}

const SIZE_UNITS: Record<string, number> = {
  '': 1,
  b: 1,
  k: 1024,
  kb: 1000,
  kib: 1024,
  m: 1024 ** 2,
  mb: 1000 ** 2,
  mib: 1024 ** 2,
  g: 1024 ** 3,
  gb: 1000 ** 3,
  gib: 1024 ** 3,
  // A node's RAM or disk is told in terabytes (walkthrough 4, O13: `--budget 1TiB` was "not a size").
  t: 1024 ** 4,
  tb: 1000 ** 4,
  tib: 1024 ** 4,
};

/** Parses a byte size: 67108864, "64MiB", "64MB", "1g"; undefined when it is not one. */
export function parseByteSize(text: string | number): number | undefined {
  if (typeof text === 'number') return Number.isSafeInteger(text) && text >= 0 ? text : undefined;
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$/.exec(text);
  if (!m) return undefined;
  const unit = SIZE_UNITS[(m[2] as string).toLowerCase()];
  if (unit === undefined) return undefined;
  return Math.round(Number(m[1]) * unit);
}
