import type { EngineSleepApi } from '../../../lib/engine-sleep-api.js';
import type { StartShard } from '../../../gen/llmgw/v1/agent_pb.js';
import type { Logger } from '../../../lib/logger.js';
import type { Readiness } from '../probes/await-readiness.js';
import type { KnownAnswer, KnownAnswerTarget } from '../probes/known-answer.js';
import type { PortOwnerCheck } from '../probes/port-owner-check.js';
import type { GangFault, ShardChange, ShardLife, ShardNext } from './shard-machine.js';
import type { ShardEngineFacts } from './shard-engine-facts.js';
import type { ShardSnapshot } from './shard-snapshot.js';
import type { StateFileWriter } from './state-file-writer.js';

/**
 * What the runner lends the steps it does not carry out itself (a death,
 * a sleep and a wake, the known answers): its shard as it is, the one
 * apply() that changes it, and its effects. Each step names the part it
 * uses (Pick), so what a step can touch is read off its signature.
 */
export interface ShardHands {
  readonly shardId: string;
  readonly spec: StartShard;
  /** The shard's fields on every log line. */
  readonly fields: { shard: string; replica: string };
  readonly logPath: string;
  /** Where failure records go (supervisor.log_dir). */
  readonly logDir: string;
  readonly stopGraceMs: number;
  /** The rank's API (http://127.0.0.1:port); '' for a rank that serves none. */
  readonly baseUrl: string;
  /** The key of the sleep API's calls (ShardRunner.adminKey). */
  readonly adminKey: string;
  /** Ends with the runner (detach). */
  readonly signal: AbortSignal;
  readonly log: Logger;
  readonly stateFile: StateFileWriter;
  readonly portOwner: PortOwnerCheck | undefined;
  /** How the shard's engine sleeps and wakes; undefined for an engine without a sleep mode. */
  readonly sleepApi: EngineSleepApi | undefined;
  /** What was read of the engine: its version, the host copy it keeps (shard-engine-facts.ts). */
  readonly facts: ShardEngineFacts;
  /** Whether the shard's wakes are checked by a known answer: the API rank of a sleep profile. */
  readonly checksAnswers: boolean;
  /** The node's known answer for (content digest, profile, engine version) where all are known (known-answer-book.ts); the shard's own otherwise. */
  contentAnswer?(): KnownAnswer | undefined;
  /** The shard as it is now. */
  life(): ShardLife;
  apply(change: ShardChange): ShardNext;
  /** Tells the control plane of a change of the status that is no change of state. */
  told(): void;
  /** Where the known answer is asked, cut short by `signal`. */
  target(signal: AbortSignal): KnownAnswerTarget;
  inFlight(): Promise<number | undefined>;
  /** Whether the rank answers as at a start, by `timeoutMs`. */
  readiness(signal: AbortSignal, timeoutMs: number): Promise<Readiness>;
  /** Ends the health watch: nothing serves any more. */
  stopServing(): void;
  /** Ends what survives the leader (the rest of its group or unit). */
  reapLeftovers(graceMs: number): Promise<void>;
  /** A rank of a gang whose engine ended at `endedAtMs`: the peer that went before it, asked once (first-to-go.ts); absent: never asked. */
  firstToGo?(endedAtMs: number): Promise<GangFault | undefined>;
  snapshot(): ShardSnapshot;
}
