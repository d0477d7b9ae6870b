import { readFileSync } from 'node:fs';
import { rename, writeFile } from 'node:fs/promises';
import { SerialWrites } from '../../../lib/files/serial-writes.js';
import type { KnownAnswer } from './known-answer.js';

/*
 * The node's known answers by what is served (issue 51): one per (content
 * digest of the model in the store, profile, engine version), recorded at
 * the first READY of that triple and checked at every later start of it.
 * A shard's own record (ShardAnswers) guards its wakes; this one guards
 * starts, so an engine that loads other bytes under a model's name (a
 * snapshot link swapped, a weight daemon serving another checkpoint of the
 * same layout) answers differently from what these bytes answered before.
 */

/** Triples kept, the most recently recorded. */
export const KNOWN_ANSWER_BOOK_MAX = 512;

export interface AnswerKey {
  digest: string;
  profile: string;
  engineVersion: string;
}

const idOf = (k: AnswerKey) => JSON.stringify([k.digest, k.profile, k.engineVersion]);

export class KnownAnswerBook {
  readonly #answers = new Map<string, KnownAnswer>();
  // A failed write: this agent holds the answer; a restarted one records it anew at the next READY.
  readonly #writes = new SerialWrites();

  constructor(private readonly path: string) {
    try {
      const f = JSON.parse(readFileSync(path, 'utf8')) as { version?: number; answers?: [string, KnownAnswer][] };
      if (f.version === 1 && Array.isArray(f.answers)) {
        for (const [id, a] of f.answers.slice(-KNOWN_ANSWER_BOOK_MAX)) if (typeof id === 'string' && typeof a?.text === 'string') this.#answers.set(id, a);
      }
    } catch {
      // None yet, or unreadable: answers are recorded anew.
    }
  }

  get(k: AnswerKey): KnownAnswer | undefined {
    return this.#answers.get(idOf(k));
  }

  record(k: AnswerKey, a: KnownAnswer): Promise<void> {
    const id = idOf(k);
    this.#answers.delete(id);
    this.#answers.set(id, a);
    while (this.#answers.size > KNOWN_ANSWER_BOOK_MAX) this.#answers.delete(this.#answers.keys().next().value as string);
    const text = `${JSON.stringify({ version: 1, answers: [...this.#answers] })}\n`;
    const tmp = `${this.path}.tmp`;
    return this.#writes.queue(async () => {
      await writeFile(tmp, text, { mode: 0o600 });
      await rename(tmp, this.path);
    });
  }

  /** No write starts after this (the agent is going away); resolves once the last one asked has ended. */
  close(): Promise<void> {
    return this.#writes.close();
  }
}
