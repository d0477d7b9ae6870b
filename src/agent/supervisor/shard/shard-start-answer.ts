import { askKnownAnswer, checkKnownAnswer, type KnownAnswer, NOT_OBTAINED } from '../probes/known-answer.js';
import type { KnownAnswerBook } from '../probes/known-answer-book.js';
import type { ShardHands } from './shard-hands.js';

/** What the start's check needs of its runner. */
export type StartAnswerHands = Pick<ShardHands, 'fields' | 'target' | 'log' | 'facts'>;

/**
 * The known answer at a start (issue 51), before READY is said, so its time
 * counts in the time to READY: the engine's version read, then its answer
 * asked and judged against the one recorded for (digest, profile, version),
 * or recorded when there is none. Resolves with the reason of a received,
 * different answer (the start is FAILED with both answers), else undefined:
 * an answer not obtained is no mismatch (review engine-fidelity-3 E2).
 */
export async function checkStartAnswer(h: StartAnswerHands, book: KnownAnswerBook, digest: string, profile: string, signal: AbortSignal): Promise<string | undefined> {
  const t0 = performance.now();
  const engineVersion = (await h.facts.read(signal)) ?? '';
  const key = { digest, profile, engineVersion };
  const target = h.target(signal);
  const recorded = book.get(key);
  const ms = () => Math.round(performance.now() - t0);
  if (recorded === undefined) {
    const asked = await askKnownAnswer(target, (target.ask?.dpRanks ?? 1) > 1 ? 0 : undefined);
    if (!asked.ok) {
      h.log.warn({ ...h.fields, why: asked.reason, ms: ms() }, `${NOT_OBTAINED} at start: nothing recorded for this model's content yet`);
      return undefined;
    }
    await book.record(key, asked.token === undefined ? { text: asked.text } : { text: asked.text, token: asked.token });
    h.log.info({ ...h.fields, digest, profile, engineVersion, answer: asked.text, ms: ms() }, "known answer recorded for the model's content");
    return undefined;
  }
  const verdict = await checkKnownAnswer(target, recorded);
  h.log.info({ ...h.fields, digest, profile, engineVersion, verdict: verdict.kind, ms: ms() }, 'known answer checked at start');
  if (verdict.kind === 'not-obtained') return undefined;
  return verdict.kind === 'differs' ? `known answer differs for the model's content ${digest} (profile ${profile}, engine ${engineVersion || 'version unknown'}): ${verdict.reason}` : undefined;
}

/**
 * The node's answer for what a shard serves, (content digest, profile,
 * engine version), where all three are known: what its wakes are checked
 * against, so a wake and a start of the same bytes answer to one record.
 */
export function contentAnswer(book: KnownAnswerBook | undefined, digest: string | undefined, profile: string, engineVersion: string | undefined): KnownAnswer | undefined {
  if (!digest || engineVersion === undefined) return undefined;
  return book?.get({ digest, profile, engineVersion });
}
