import { errorMessage } from '../../../lib/errors.js';
import { SerialWrites } from '../../../lib/files/serial-writes.js';
import { removeStateFile, updateStateFile } from '../../../lib/files/state-file.js';
import type { Logger } from '../../../lib/logger.js';
import type { ShardId } from '../../../lib/shard-id.js';

/**
 * The changes a runner makes to its shard's state file, one at a time, so
 * the last request is the one on disk. Failures are logged, never thrown
 * (each method says why). After close() (the agent going away) none starts.
 */
export class StateFileWriter {
  private readonly writes = new SerialWrites();

  constructor(
    private readonly statePath: string,
    private readonly shardId: ShardId,
    private readonly log: Logger,
  ) {}

  /**
   * Records a drain or its cancellation. A failure is logged, not thrown:
   * the drain holds in memory (refusing it would keep traffic on an engine
   * an operator is taking away); only an agent restart would forget it.
   */
  recordDrain(drainRequested: boolean): Promise<void> {
    return this.writes.queue(async () => {
      try {
        await updateStateFile(this.statePath, this.shardId, { drainRequested });
      } catch (err) {
        this.log.warn(
          { shard: this.shardId, file: this.statePath, err: errorMessage(err) },
          drainRequested
            ? 'shard is DRAINING but the drain could not be recorded; an agent restart would bring it back READY'
            : 'drain cancelled but the state file still records it; an agent restart would bring it back DRAINING',
        );
      }
    });
  }

  /**
   * Records a sleep at `level`, or (0) a wake. A failure is logged, not
   * thrown: the engine sleeps or wakes whatever the disk says; only an agent
   * restart would then adopt it in the wrong state.
   */
  recordSleep(level: number, awakeMib = 0): Promise<void> {
    return this.writes.queue(async () => {
      try {
        await updateStateFile(this.statePath, this.shardId, { sleepLevel: level, sleepAwakeMib: level > 0 && awakeMib > 0 ? awakeMib : undefined });
      } catch (err) {
        this.log.warn(
          { shard: this.shardId, file: this.statePath, err: errorMessage(err) },
          level > 0
            ? 'shard is SLEEPING but the sleep could not be recorded; an agent restart would bring it back READY'
            : 'shard woke but the state file still records its sleep; an agent restart would bring it back SLEEPING',
        );
      }
    });
  }

  /**
   * Records the engine's known answer (issue 36). A failure is logged, not
   * thrown: this agent holds it in memory; only a restarted one would wake
   * the shard checked against garbage alone.
   */
  recordKnownAnswer(knownAnswer: string, knownAnswerToken?: string): Promise<void> {
    return this.writes.queue(async () => {
      try {
        await updateStateFile(this.statePath, this.shardId, { knownAnswer, knownAnswerToken });
      } catch (err) {
        this.log.warn({ shard: this.shardId, file: this.statePath, err: errorMessage(err) }, 'the known answer could not be recorded; a restarted agent would check a wake against garbage alone');
      }
    });
  }

  /**
   * Records what was read of the engine (its version, the host copy it keeps
   * pinned). A failure is logged, not thrown: this agent holds it in memory;
   * a restarted one reads the version again at the engine's READY, and would
   * ask for room for a copy the engine already holds.
   */
  recordFacts(facts: { engineVersion?: string; hostCopyMib?: number }): Promise<void> {
    return this.writes.queue(async () => {
      try {
        await updateStateFile(this.statePath, this.shardId, facts);
      } catch (err) {
        this.log.warn({ shard: this.shardId, file: this.statePath, err: errorMessage(err), ...facts }, 'what was read of the engine could not be recorded; a restarted agent reads it again');
      }
    });
  }

  /**
   * Removes the state file of an engine that is gone. Failing to is logged,
   * not thrown: the engine is stopped whatever the disk says, and a stale
   * file names a process that no longer matches its identity, which the next
   * agent start judges dead and cleans. Throwing here once turned a
   * successful stop on a read-only state directory into "stop failed" after
   * STOPPED had been reported (found by the fault campaign).
   */
  remove(): Promise<void> {
    // Queued: a drain being recorded would otherwise write the file back after it is gone.
    return this.writes.queue(async () => {
      try {
        await removeStateFile(this.statePath);
      } catch (err) {
        this.log.warn({ shard: this.shardId, file: this.statePath, err: errorMessage(err) }, 'engine is gone but its state file could not be removed');
      }
    });
  }

  /**
   * The agent going away: no change starts after this (this agent's memory
   * holds it; the next agent reads the file as it was, or judges a file left
   * by a gone engine dead and cleans it). Resolves once the last one asked
   * has ended, so that the agent's exit does not cut one off halfway.
   */
  close(): Promise<void> {
    return this.writes.close();
  }
}
