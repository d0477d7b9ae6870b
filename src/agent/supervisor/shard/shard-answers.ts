import { setTimeout as sleep } from 'node:timers/promises';
import { ShardState } from '../../../gen/llmgw/v1/agent_pb.js';
import { formatDuration } from '../../../lib/duration.js';
import { isServing } from '../../../lib/shard-states.js';
import type { HealthVerdict } from '../probes/health-watch.js';
import { type Answered, askKnownAnswer, checkKnownAnswer, type KnownAnswer, NOT_OBTAINED } from '../probes/known-answer.js';
import { checkUntilAnswered, type NotObtained } from '../probes/known-answer-retry.js';
import type { ShardHands } from './shard-hands.js';
import { KNOWN_ANSWER_FAULT, type ShardLife } from './shard-machine.js';

const S = ShardState;

/** What the known answers of one shard need of its runner. */
export type AnswerHost = Pick<ShardHands, 'fields' | 'life' | 'apply' | 'target' | 'checksAnswers' | 'log' | 'stateFile' | 'signal' | 'told' | 'contentAnswer'>;

/** The answer recorded of a shard, if any. */
export function recordedAnswer(l: ShardLife): KnownAnswer | undefined {
  if (l.knownAnswer === undefined) return undefined;
  return l.knownAnswerToken === undefined ? { text: l.knownAnswer } : { text: l.knownAnswer, token: l.knownAnswerToken };
}

/**
 * What a shard's engine is checked against: the node's answer for its
 * (content digest, profile, engine version) where one is recorded, so a
 * wake answers to the same record as every start of these bytes (issue 51);
 * else the shard's own, recorded at its first READY.
 */
function referenceAnswer(h: Pick<AnswerHost, 'life' | 'contentAnswer'>): KnownAnswer | undefined {
  return h.contentAnswer?.() ?? recordedAnswer(h.life());
}

/**
 * The known answer of one shard (probes/known-answer.ts): recorded from its
 * first READY, asked again after each wake, after a sleep the agent did not
 * ask for, and periodically when the operator asks. Every outcome goes back
 * to the machine as a change. Only an answer received and different is a
 * verdict against the engine; an ask that failed leaves the shard as it was,
 * with the reason logged (and, after a wake, as its error), and is asked
 * again (review engine-fidelity-3 E2).
 */
export class ShardAnswers {
  /** The ask under way, shared by concurrent callers (a sleep right after READY waits for it). */
  #recording: Promise<KnownAnswer | undefined> | undefined;
  /** The check of a shard awake again after a sleep it was not asked, while it runs. */
  #recheck: Promise<void> | undefined;
  /** The proof of the last wake while it is asked (proveWake). */
  #proof: AbortController | undefined;

  constructor(private readonly host: AnswerHost) {}

  /**
   * The engine's known answer: recorded, or asked now of the READY engine
   * (of DP rank 0 where it has several) and recorded in memory and in the
   * state file. Undefined when the engine gives none. `periodic`: asked for
   * the periodic check even without sleep mode.
   */
  of(signal: AbortSignal, periodic = false): Promise<KnownAnswer | undefined> {
    const h = this.host;
    if (!h.checksAnswers && !periodic) return Promise.resolve(undefined);
    const known = referenceAnswer(h);
    if (known !== undefined) return Promise.resolve(known);
    this.#recording ??= (async () => {
      try {
        const target = h.target(signal);
        const asked = await askKnownAnswer(target, (target.ask?.dpRanks ?? 1) > 1 ? 0 : undefined);
        if (!asked.ok) {
          h.log.warn({ ...h.fields, why: asked.reason }, 'the engine gave no known answer; its wakes cannot be checked until it does');
          return undefined;
        }
        if ('refused' in h.apply({ kind: 'known-answer', text: asked.text, ...(asked.token !== undefined ? { token: asked.token } : {}) })) return undefined;
        h.log.info({ ...h.fields, answer: asked.text, token: asked.token }, 'known answer recorded');
        await h.stateFile.recordKnownAnswer(asked.text, asked.token);
        return recordedAnswer(h.life());
      } catch {
        return undefined;
      } finally {
        this.#recording = undefined;
      }
    })();
    return this.#recording;
  }

  /** Logs a failed ask: the shard stays as it is. */
  #notObtained(n: NotObtained, when: string): void {
    const h = this.host;
    h.log.warn({ ...h.fields, why: n.reason, attempt: n.attempt, nextInMs: n.nextInMs }, `${NOT_OBTAINED} ${when}: a failed ask is no wrong answer; the shard stays ${h.life().state === S.SLEEPING ? 'SLEEPING' : 'as it is'} and is asked again`);
  }

  /**
   * supervisor.known_answer_interval: the known answer asked again of a
   * serving engine, for engines that answer /health while generating
   * nothing or garbage (vLLM #37729). A changed answer is a fault of the
   * shard (UNHEALTHY, "known answer changed: …") until the engine gives it
   * again; like every health verdict, reported and never acted on. An ask
   * that fails (a busy engine at peak load) changes nothing and is asked
   * again with backoff. Ends with `signal` (the shard's serving).
   */
  async watch(intervalMs: number, signal: AbortSignal): Promise<void> {
    const h = this.host;
    let fault = '';
    try {
      for (;;) {
        await sleep(intervalMs, undefined, { signal });
        if (!isServing(h.life().state)) continue;
        const recorded = await this.of(signal, true);
        if (recorded === undefined) continue;
        const verdict = await checkUntilAnswered(h.target(signal), recorded, (n) => this.#notObtained(n, 'by the periodic check'));
        if (!isServing(h.life().state)) continue;
        if (verdict.kind === 'differs' && fault === '') {
          fault = `${KNOWN_ANSWER_FAULT}: ${verdict.reason}`;
          h.apply({ kind: 'gpu-fault', reason: fault });
        } else if (verdict.kind === 'same' && fault !== '') {
          h.apply({ kind: 'gpu-sound', only: fault });
          fault = '';
        }
      }
    } catch {
      // The watch ends with the shard's serving (stop, death, detach).
    }
  }

  /**
   * After a sleep the agent did not ask for, the engine answers again: its
   * known answer decides between READY and FAILED (a level 2 woken with a
   * bare /wake_up answers garbage). One check at a time; an ask that fails
   * leaves the shard UNHEALTHY, and the next probe tick asks again.
   */
  recheckAfterUnaskedSleep(v: HealthVerdict, signal: AbortSignal): void {
    this.#recheck ??= this.#recheckOnce(v, signal).finally(() => (this.#recheck = undefined));
  }

  async #recheckOnce(v: HealthVerdict, signal: AbortSignal): Promise<void> {
    const h = this.host;
    const verdict = h.checksAnswers ? await checkKnownAnswer(h.target(signal), referenceAnswer(h)).catch(() => undefined) : undefined;
    if (signal.aborted || (h.checksAnswers && verdict === undefined)) return;
    if (verdict?.kind === 'not-obtained') {
      this.#notObtained({ reason: verdict.reason, attempt: 1, nextInMs: 0 }, 'after a sleep the agent did not ask for');
      return;
    }
    if (verdict?.kind === 'differs') {
      h.apply({ kind: 'answer-after-unasked-sleep', lost: `woke without its weights after a sleep the agent did not ask for: ${verdict.reason}`, verdict: v });
      return;
    }
    h.apply({ kind: 'answer-after-unasked-sleep', verdict: { ...v, why: verdict ? `${v.why}; ${verdict.how}` : v.why } });
  }

  /**
   * The proof of a wake: the known answer asked until one is received, and
   * `settle`d (READY, or FAILED when it differs) whether the wake still
   * waits for it or gave up at its deadline. Until then each failed ask
   * leaves the shard SLEEPING with "known answer not obtained: …" as its
   * error, told. A newer wake's proof replaces this one; a shard that left
   * SLEEPING (stopped, dead) is asked no more.
   */
  proveWake(settle: (answer: Answered) => Promise<void>): Promise<void> {
    const h = this.host;
    this.#proof?.abort();
    const proof = new AbortController();
    this.#proof = proof;
    const signal = AbortSignal.any([h.signal, proof.signal]);
    const notObtained = (n: NotObtained) => {
      if (h.life().state !== S.SLEEPING) {
        proof.abort();
        return;
      }
      this.#notObtained(n, 'after a wake');
      h.apply({ kind: 'wake-failed', error: `${NOT_OBTAINED}: ${n.reason}; asked again in ${formatDuration(n.nextInMs)}, READY once it gives its known answer` });
      h.told();
    };
    return checkUntilAnswered(h.target(signal), referenceAnswer(h), notObtained)
      .then(settle)
      .finally(() => {
        if (this.#proof === proof) this.#proof = undefined;
      });
  }
}
