/*
 * A rung's spread (issue 51): the P50 and P90 of its times to READY that
 * Inventory.warmth publishes, the autoscalers' cold-start horizon. The P90 is
 * read as a promise about the next start: at most one in ten over it. Two
 * ways the plain 90th percentile of the samples broke it (bench 14d, 12.5-20 %
 * of starts over it):
 *
 * - Few samples under-cover. Of n samples from one distribution, the next
 *   start exceeds the r-th smallest with chance 1 - r/(n+1) (order
 *   statistics: the next sample is equally likely to fall in each of the n+1
 *   gaps). Nearest rank took r = ceil(0.9 n): the 18th of 20 covers 18/21,
 *   so 14 % of next starts go over it. The conformal rank
 *   r = ceil(0.9 (n+1)) covers at least 90 %: the 19th of 20. Under 9
 *   samples no sample covers 90 % and the slowest is published (n/(n+1)).
 * - The times do not come from one distribution: slow starts come in runs
 *   (another tenant's load, a filling disk), and a window of quiet starts is
 *   a promise the next run breaks. So each start is scored against the P90
 *   published before it, and a margin on top of the order statistic rises at
 *   each start over it and falls slowly at each start under it (quantile
 *   tracking, as in Angelopoulos, Candès, Tibshirani, "Conformal PID Control
 *   for Time Series Prediction", 2023): a rise of 0.9 steps per start over
 *   against a fall of 0.1 step per start under settles where one start in ten
 *   goes over, whatever the sequence, instead of trusting the window.
 *
 * A single slow start neither moves the P50 nor becomes the P90 of a full
 * window (it is the 20th of 20, not the 19th); it raises the margin by
 * P90_MARGIN_STEP·0.9 once, which ten quiet starts take back.
 */

/** The share of next starts the published P90 is meant to cover. */
export const P90_COVER = 0.9;
/**
 * How far the margin moves per scored start: up by step·P90_COVER at a start
 * over the P90, down by step·(1 - P90_COVER) at one under it. 0.05: a miss
 * widens the P90 by 4.5 % of its order statistic, nine quiet starts undo it.
 * Replayed on bench 14d's 60 recorded starts, 0.05 put 4 of 40 over (6 with
 * no margin) at a P90 1.19x the P50 on average; 0.2 also 4, at 1.27x: a
 * larger step widens without covering more.
 */
export const P90_MARGIN_STEP = 0.05;
/** The margin's ceiling: a P90 at most twice the order statistic it rests on, whatever a run of misses did. */
export const P90_MARGIN_MAX = 1;

/** P50 and P90 in milliseconds, for samples oldest first and the rung's margin. */
export interface RungSpread {
  p50Ms: number;
  p90Ms: number;
}

/**
 * The nearest-rank percentile of `xs`: the smallest sample at or above p% of
 * them, never a value no start took. The P50.
 */
export function percentile(xs: readonly number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.max(0, Math.ceil((p / 100) * s.length) - 1)] as number;
}

/**
 * The smallest sample that the next one, drawn like them, stays at or under
 * with chance at least `cover`: the ceil(cover·(n+1))-th smallest, or the
 * largest when n is too small for any to (n < 9 for 0.9).
 */
export function upperPrediction(xs: readonly number[], cover: number): number {
  const s = [...xs].sort((a, b) => a - b);
  const rank = Math.min(s.length, Math.ceil(cover * (s.length + 1)));
  return s[Math.max(0, rank - 1)] as number;
}

/** What a rung publishes from its samples (not empty) and its margin. */
export function rungSpread(samples: readonly number[], margin: number): RungSpread {
  return { p50Ms: percentile(samples, 50), p90Ms: Math.round(upperPrediction(samples, P90_COVER) * (1 + clampMargin(margin))) };
}

/** The margin after a start that went over the P90 published before it (`over`), or not. */
export function nextP90Margin(margin: number, over: boolean): number {
  return clampMargin(clampMargin(margin) + P90_MARGIN_STEP * (over ? P90_COVER : -(1 - P90_COVER)));
}

function clampMargin(m: number): number {
  return Number.isFinite(m) ? Math.min(P90_MARGIN_MAX, Math.max(0, m)) : 0;
}
