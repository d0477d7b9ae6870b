import { stateName } from '../../../lib/shard-states.js';
import type { ShardLife } from './shard-machine.js';

/**
 * A shard that died or never became ready, with what the agent reports about
 * it (ShardStatus.exit_code, last_output).
 *
 * Deliberately not an LlmgwError: there `exitCode` is the CLI's own exit
 * status, and here it is the engine's. One name with two meanings on one
 * object would have the agent report "exit code 1" for an engine killed by
 * SIGKILL (137).
 */
export class ShardFailedError extends Error {
  override readonly name = 'ShardFailedError';
  readonly shardId: string;
  /** The engine's exit status, 128+n when killed by signal n; null when unknown (adopted engine, timeout). */
  readonly exitCode: number | null;
  /** e.g. 'SIGKILL'; null when it exited by itself or is still running. */
  readonly signal: string | null;
  readonly lastOutput: string[];

  constructor(
    shardId: string,
    message: string,
    details: { exitCode?: number | null; signal?: string | null; lastOutput?: string[] } = {},
  ) {
    super(message);
    this.shardId = shardId;
    this.exitCode = details.exitCode ?? null;
    this.signal = details.signal ?? null;
    this.lastOutput = details.lastOutput ?? [];
  }
}

/** The error a shard that failed to start or settle is thrown with: its error (or state), exit and last output as the machine holds them. */
export function shardFailedError(shardId: string, life: ShardLife): ShardFailedError {
  const { exitCode, signal, lastOutput, error, state } = life;
  return new ShardFailedError(shardId, `shard ${shardId}: ${error || stateName(state)}`, { exitCode, signal, lastOutput: [...lastOutput] });
}
