import { setTimeout as sleep } from 'node:timers/promises';
import { ShardState } from '../../../gen/llmgw/v1/agent_pb.js';
import type { HealthVerdict } from '../probes/health-watch.js';
import { askKnownAnswer, checkKnownAnswer } from '../probes/known-answer.js';
import type { ShardHands } from './shard-hands.js';
import { KNOWN_ANSWER_FAULT } from './shard-machine.js';

const S = ShardState;

/** What the known answers of one shard need of its runner. */
export type AnswerHost = Pick<ShardHands, 'fields' | 'life' | 'apply' | 'target' | 'checksAnswers' | 'log' | 'stateFile'>;

/** A serving state, in which an engine's answer is asked and judged. */
const answering = (s: ShardState) => s === S.READY || s === S.UNHEALTHY || s === S.DRAINING;

/**
 * The known answer of one shard (probes/known-answer.ts): recorded from its
 * first READY, asked again after each wake, after a sleep the agent did not
 * ask for, and periodically when the operator asks. Every outcome goes back
 * to the machine as a change.
 */
export class ShardAnswers {
  /** The ask under way, shared by concurrent callers (a sleep right after READY waits for it). */
  #recording: Promise<string | undefined> | undefined;
  /** The check of a shard awake again after a sleep it was not asked, while it runs. */
  #recheck: Promise<void> | undefined;

  constructor(private readonly host: AnswerHost) {}

  /**
   * The engine's known answer: recorded, or asked now of the READY engine
   * and recorded in memory and in the state file. Undefined when the engine
   * gives none. `periodic`: asked for the periodic check even without sleep mode.
   */
  of(signal: AbortSignal, periodic = false): Promise<string | undefined> {
    const h = this.host;
    if (!h.checksAnswers && !periodic) return Promise.resolve(undefined);
    const known = h.life().knownAnswer;
    if (known !== undefined) return Promise.resolve(known);
    this.#recording ??= (async () => {
      try {
        const asked = await askKnownAnswer(h.target(signal));
        if (!asked.ok) {
          h.log.warn({ ...h.fields, why: asked.reason }, 'the engine gave no known answer; its wakes cannot be checked until it does');
          return undefined;
        }
        if ('refused' in h.apply({ kind: 'known-answer', text: asked.text })) return undefined;
        h.log.info({ ...h.fields, answer: asked.text }, 'known answer recorded');
        await h.stateFile.recordKnownAnswer(asked.text);
        return asked.text;
      } catch {
        return undefined;
      } finally {
        this.#recording = undefined;
      }
    })();
    return this.#recording;
  }

  /**
   * supervisor.known_answer_interval: the known answer asked again of a
   * serving engine, for engines that answer /health while generating
   * nothing or garbage (vLLM #37729). A changed answer is a fault of the
   * shard (UNHEALTHY, "known answer changed: …") until the engine gives it
   * again; like every health verdict, reported and never acted on. Ends with
   * `signal` (the shard's serving).
   */
  async watch(intervalMs: number, signal: AbortSignal): Promise<void> {
    const h = this.host;
    let fault = '';
    try {
      for (;;) {
        await sleep(intervalMs, undefined, { signal });
        if (!answering(h.life().state)) continue;
        const recorded = await this.of(signal, true);
        if (recorded === undefined) continue;
        const verdict = await checkKnownAnswer(h.target(signal), recorded);
        if (!answering(h.life().state)) continue;
        if (!verdict.ok && fault === '') {
          fault = `${KNOWN_ANSWER_FAULT}: ${verdict.reason}`;
          h.apply({ kind: 'gpu-fault', reason: fault });
        } else if (verdict.ok && fault !== '') {
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
   * bare /wake_up answers garbage). One check at a time; asked nothing, the
   * next probe tick asks again.
   */
  recheckAfterUnaskedSleep(v: HealthVerdict, signal: AbortSignal): void {
    this.#recheck ??= this.#recheckOnce(v, signal).finally(() => (this.#recheck = undefined));
  }

  async #recheckOnce(v: HealthVerdict, signal: AbortSignal): Promise<void> {
    const h = this.host;
    const verdict = h.checksAnswers ? await checkKnownAnswer(h.target(signal), h.life().knownAnswer).catch(() => undefined) : undefined;
    if (signal.aborted || (h.checksAnswers && verdict === undefined)) return;
    if (verdict && !verdict.ok) {
      h.apply({ kind: 'answer-after-unasked-sleep', lost: `woke without its weights after a sleep the agent did not ask for: ${verdict.reason}`, verdict: v });
      return;
    }
    h.apply({ kind: 'answer-after-unasked-sleep', verdict: { ...v, why: verdict ? `${v.why}; ${verdict.how}` : v.why } });
  }
}
