import { setTimeout as sleep } from 'node:timers/promises';
import { type Answered, checkKnownAnswer, KNOWN_ANSWER_TIMEOUT_MS, type KnownAnswer, type KnownAnswerTarget } from './known-answer.js';

/*
 * A known answer asked until one is received (review engine-fidelity-3 E2):
 * a failed ask (a timeout, 429/503, a refused or reset connection) is no
 * verdict, only a reason to ask again, after a pause that doubles up to
 * maxDelayMs. Each ask's own limit doubles as well, up to maxTimeoutMs: a
 * request the agent gives up on is dropped by the engine (the client went
 * away) and the next one queues at the back, so an ask that always gave up
 * after 30 s would never reach the front of a queue longer than that.
 */

export interface RetryPolicy {
  firstDelayMs: number;
  maxDelayMs: number;
  firstTimeoutMs: number;
  maxTimeoutMs: number;
}

/** How far an ask's own limit may grow over the first's: 30 s grows to 10 min by default. */
export const MAX_TIMEOUT_FACTOR = 20;

/**
 * The retry policy of asks whose first waits `firstTimeoutMs`
 * (supervisor.known_answer_timeout): every limit scales with it, so a node
 * that raises it for a big model on a busy engine keeps the same number of
 * asks before the longest. The pauses between asks do not: they say how
 * soon an engine that refused (a 503) is asked again, which has nothing to
 * do with how long its answer may take.
 */
export function knownAnswerRetry(firstTimeoutMs: number): RetryPolicy {
  return { firstDelayMs: 1000, maxDelayMs: 30_000, firstTimeoutMs, maxTimeoutMs: firstTimeoutMs * MAX_TIMEOUT_FACTOR };
}

export const KNOWN_ANSWER_RETRY: RetryPolicy = knownAnswerRetry(KNOWN_ANSWER_TIMEOUT_MS);

/** One failed ask: why, which one it was (1 = the first), and when the next one goes. */
export interface NotObtained {
  reason: string;
  attempt: number;
  nextInMs: number;
}

/**
 * Checks the known answer until the engine gives one (checkKnownAnswer),
 * calling `notObtained` for each failed ask. Throws when `t.signal` aborts
 * (the shard stopped, a newer wake took over). Without a policy the first
 * ask waits the target's own limit (the configured one), later ones longer.
 */
export async function checkUntilAnswered(
  t: KnownAnswerTarget,
  recorded: KnownAnswer | undefined,
  notObtained: (n: NotObtained) => void,
  policy: RetryPolicy = knownAnswerRetry(t.timeoutMs ?? KNOWN_ANSWER_TIMEOUT_MS),
): Promise<Answered> {
  for (let attempt = 1; ; attempt++) {
    const grow = 2 ** Math.min(attempt - 1, 20);
    const verdict = await checkKnownAnswer({ ...t, timeoutMs: Math.min(policy.firstTimeoutMs * grow, policy.maxTimeoutMs) }, recorded);
    if (verdict.kind !== 'not-obtained') return verdict;
    const nextInMs = Math.min(policy.firstDelayMs * grow, policy.maxDelayMs);
    notObtained({ reason: verdict.reason, attempt, nextInMs });
    await sleep(nextInMs, undefined, { signal: t.signal });
  }
}
