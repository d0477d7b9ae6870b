import { EventEmitter } from 'node:events';
import type { Logger } from '../lib/logger.js';
import { type CordonRecord, cordonFilePath, readCordonFile, removeCordonFile, writeCordonFile } from './cordon-file.js';

/** The node's cordon now: undefined when it is schedulable. */
export type CordonState = CordonRecord | undefined;

/**
 * `ctl cordon`: the node refuses new StartShards with the operator's reason
 * and keeps every running shard (kubectl cordon, Nomad's node eligibility).
 * Kept in <state_dir>/cordon.json so an agent restart — the usual next step
 * of maintenance — does not make the node schedulable behind the
 * operator's back. Emits 'change' after the file is written, with the
 * state and the uid that asked.
 */
export class NodeCordon extends EventEmitter<{ change: [CordonState, number] }> {
  private state: CordonState;
  private readonly path: string;

  constructor(stateDir: string, private readonly logger: Logger) {
    super();
    this.path = cordonFilePath(stateDir);
  }

  current(): CordonState {
    return this.state;
  }

  /**
   * Reads the cordon a previous agent left. A corrupt file keeps the node
   * cordoned: the file exists only because an operator cordoned the node
   * and is written atomically, so a bad one is damage or a hand edit, and
   * guessing "schedulable" would put work on a node under maintenance; the
   * cost of guessing "cordoned" is capacity, undone by one `ctl uncordon`.
   */
  async load(): Promise<void> {
    const read = await readCordonFile(this.path);
    if (read.kind === 'none') return;
    if (read.kind === 'cordoned') {
      this.state = read.record;
      this.logger.info({ reason: read.record.reason, since: new Date(read.record.sinceMs).toISOString(), uid: read.record.byUid }, 'node is cordoned');
      return;
    }
    this.state = { reason: `the cordon file ${this.path} is corrupt (${read.why}), so the node is kept cordoned`, sinceMs: Date.now(), byUid: -1 };
    this.logger.warn({ file: this.path, err: read.why }, 'cordon file corrupt; node kept cordoned until ctl uncordon');
  }

  /** Cordons (with `reason`, by `uid`) or uncordons; false when the node already was as asked. Written to disk before it returns. */
  async set(cordon: boolean, reason: string, uid: number): Promise<boolean> {
    if (!cordon) {
      if (!this.state) return false;
      await removeCordonFile(this.path);
      this.state = undefined;
      this.logger.info({ uid }, 'node uncordoned');
    } else {
      // Cordoning again with a new reason replaces the reason but keeps the time it began.
      if (this.state && this.state.reason === reason) return false;
      const next: CordonRecord = { reason, sinceMs: this.state?.sinceMs ?? Date.now(), byUid: uid };
      const replaced = this.state?.reason;
      await writeCordonFile(this.path, next);
      this.state = next;
      if (replaced !== undefined) this.logger.info({ reason, uid, replaced }, "node's cordon reason replaced");
      else this.logger.info({ reason, uid }, 'node cordoned');
    }
    this.emit('change', this.state, uid);
    return true;
  }

  /** The one line a refused start carries; undefined when not cordoned. */
  refusal(): string | undefined {
    const s = this.state;
    if (!s) return undefined;
    const who = s.byUid >= 0 ? ` by uid ${s.byUid}` : '';
    const why = s.reason === '' ? '' : ` (${s.reason})`;
    return `node is cordoned since ${new Date(s.sinceMs).toISOString()}${who}${why}; run llmgw ctl uncordon`;
  }
}
