import { errorMessage } from '../../../lib/errors.js';
import { checkKnownAnswer, NOT_OBTAINED } from '../probes/known-answer.js';
import { askAsleep, judgeAdoptedSleep } from './adopted-sleep.js';
import { recordedAnswer } from './shard-answers.js';
import type { ShardHands } from './shard-hands.js';

/** What an adoption's sleep check needs of its shard's runner. */
export type AdoptedSleepHands = Pick<ShardHands, 'spec' | 'fields' | 'baseUrl' | 'adminKey' | 'log' | 'stateFile' | 'sleepApi' | 'checksAnswers' | 'life' | 'apply' | 'told' | 'facts' | 'target'>;

/**
 * What an adopted engine that serves the API says of its sleep, applied over
 * its record (adopted-sleep.ts) before its readiness is asked: found
 * asleep, it settles SLEEPING and its file says so; found awake, true: its
 * wake finished after the agent that asked it had stopped, and only its
 * known answer tells whether its weights came back (unseenWakeAnswer). Either
 * correction is told the control plane at once: Register went out with the
 * file's word (registerState), and READY or SLEEPING comes only once the
 * adoption has settled. An engine that does not say (no query, as SGLang:
 * docs/engines.md; no answer within ADOPTED_SLEEP_QUERY_MS) is adopted as
 * its record says, as before, and the log and Status's note say so.
 */
export async function adoptedSleep(h: AdoptedSleepHands, signal: AbortSignal): Promise<boolean> {
  const api = h.sleepApi;
  if (!h.baseUrl || !api || h.spec.profile?.sleepMode !== true) return false;
  if (!api.asleepQuery) return fromRecord(h, `${h.spec.profile.engine || 'the engine'} answers nothing that says whether its memory is released`);
  h.log.info({ ...h.fields, recordedLevel: h.life().sleep?.level ?? 0 }, 'asking the adopted engine whether it sleeps');
  const verdict = judgeAdoptedSleep(h.life().sleep?.level, await askAsleep({ baseUrl: h.baseUrl, api, apiKey: h.adminKey, signal }));
  // Agreeing: the engine's word and the file's are one.
  if (verdict.kind === 'as-recorded') return verdict.why ? fromRecord(h, verdict.why) : false;
  h.log.warn({ ...h.fields, why: verdict.why }, 'adopted engine: its state file was wrong about its sleep');
  if (verdict.kind === 'awake') {
    h.apply({ kind: 'found-awake', why: verdict.why });
    h.told();
    return true;
  }
  h.apply({ kind: 'found-asleep', level: verdict.level, why: verdict.why });
  // Before SLEEPING is said: a restart from here adopts it asleep without having to ask.
  await h.stateFile.recordSleep(verdict.level);
  h.told();
  return false;
}

/** Adopted as its record says, the engine not saying (`why`): logged, and a recorded sleep noted in Status. */
function fromRecord(h: AdoptedSleepHands, why: string): false {
  // Info: an engine still loading (adopted before its first READY) refuses the question, and nothing is wrong.
  h.log.info({ ...h.fields, recordedLevel: h.life().sleep?.level ?? 0, why }, 'adopted engine: sleep taken from its state file');
  const sleep = h.life().sleep;
  if (sleep) h.facts.sleepFromRecord(sleep, why);
  return false;
}

/**
 * The known answer of an engine recorded asleep and found awake, against
 * the one recorded before its sleep: a level-2 wake that mapped the weights'
 * memory without reloading them serves garbage with /health, /v1/models and
 * its GPU memory all as they should be (vLLM #29341). An answer that differs
 * fails it (error); one not obtained is said, not judged (note), as when a
 * sleep is undone (shard-sleep-steps.ts).
 */
export async function unseenWakeAnswer(h: AdoptedSleepHands, signal: AbortSignal): Promise<{ error?: string; note?: string }> {
  if (!h.checksAnswers) return { note: '; woken while the agent was down (its known answer is not checked for this rank)' };
  const v = await checkKnownAnswer(h.target(signal), recordedAnswer(h.life())).catch((err: unknown) => ({ kind: 'not-obtained' as const, reason: errorMessage(err) }));
  if (v.kind === 'differs') return { error: `woke without its weights while the agent was down: ${v.reason}` };
  if (v.kind === 'not-obtained') return { note: `; woken while the agent was down; ${NOT_OBTAINED}: ${v.reason}` };
  return { note: `; woken while the agent was down: ${v.how}` };
}
