import { ShardState } from '../../../gen/llmgw/v1/agent_pb.js';
import type { DeathInfo } from '../../../lib/engine-death.js';
import { explainEngineExit } from '../../engines/explain-engine-exit.js';
import { readLastOutput, recordShardFailure, shardFailureRecord } from './shard-failure.js';
import type { ShardHands } from './shard-hands.js';
import { type GangFault, gangError, judgeDeath } from './shard-machine.js';

/** SIGTERM to SIGKILL for what survives a dead engine leader: its work is lost already. */
export const LEFTOVER_GRACE_MS = 2000;

/** What carrying out a death needs of its shard's runner. */
export type DeathHands = Pick<ShardHands, 'logPath' | 'signal' | 'logDir' | 'stopGraceMs' | 'portOwner' | 'log' | 'life' | 'apply' | 'stopServing' | 'reapLeftovers' | 'snapshot' | 'firstToGo'>;

/**
 * Carries out what the death of a shard's engine leader means (judgeDeath):
 * the exit status at once, then its last words, its leftovers reaped, who
 * held its port, a failure record, and last what it means for the shard as
 * it is then (a stop may have begun meanwhile, which the machine knows). A
 * rank of a gang asks its peers meanwhile which of them went first
 * (first-to-go.ts), and names it: its own end may only have followed.
 */
export async function onEngineDeath(h: DeathHands, info: DeathInfo): Promise<void> {
  if (h.life().dead || h.signal.aborted) return;
  const endedAtMs = Date.now();
  h.apply({ kind: 'exited', atMs: endedAtMs, ...(info.known ? { exit: { code: info.code, signal: info.signal } } : {}) });
  h.stopServing();
  // Asked while the leftovers are reaped, and only for a death that will be reported (not a stop's).
  const reported = judgeDeath(h.life().state, info).to !== undefined;
  const asking: Promise<GangFault | undefined> = reported && h.firstToGo ? h.firstToGo(endedAtMs).catch(() => undefined) : Promise.resolve(undefined);
  // Read before the state changes, so the report carries the engine's own last words.
  const lastOutput = await readLastOutput(h.logPath);
  if (h.signal.aborted) return;
  if (judgeDeath(h.life().state, info).reap) await h.reapLeftovers(Math.min(LEFTOVER_GRACE_MS, h.stopGraceMs));
  const verdict = judgeDeath(h.life().state, info);
  if (h.signal.aborted || verdict.error === undefined) return;
  // Who held the port, and what an engine that refused its command line says in its last line (not its exit code).
  const details = h.life().state === ShardState.STARTING ? [await squatterAtDeath(h), explainEngineExit(lastOutput)].filter((d) => d !== undefined) : [];
  const firstToGo = await asking;
  if (h.signal.aborted) return;
  if (verdict.record) {
    const error = [verdict.error, ...details].join(': ') + (firstToGo ? `; ${gangError(firstToGo)}` : '');
    await recordShardFailure({ logDir: h.logDir, logPath: h.logPath, log: h.log }, shardFailureRecord({ ...h.snapshot(), error, lastOutput: [...lastOutput] }, new Date()));
  }
  if (!h.signal.aborted) h.apply({ kind: 'died', info, details, lastOutput, ...(firstToGo ? { firstToGo } : {}) });
}

/**
 * Who holds the port of an engine that died while STARTING, when not the
 * engine: vLLM and SGLang exit 1 when their bind or listen finds the port
 * taken (uvicorn logs the errno and exits), and "exited with code 1" alone
 * sent operators to the engine's log to find the squatter the agent had
 * already seen (review N7). Asked after the reap, so no process of the
 * engine's is left to hold it; the squatter last seen while STARTING
 * answers for one that left between the engine's failed bind and now.
 */
async function squatterAtDeath(h: DeathHands): Promise<string | undefined> {
  const owner = await h.portOwner?.().catch(() => undefined);
  return owner?.owner === 'other' ? owner.reason : h.life().squatter;
}
