import { fromJson, type JsonValue, toJson } from '@bufbuild/protobuf';
import { closeSync, constants, fstatSync, openSync, readFileSync } from 'node:fs';
import { open, rename, unlink } from 'node:fs/promises';
import { dirname } from 'node:path';
import { writeFileAtomic } from '../write-file-atomic.js';
import { assertTrustedDirectory } from './check-directory-trust.js';
import { type StartShard, StartShardSchema } from '../../gen/llmgw/v1/agent_pb.js';
import { errnoCode } from '../errno.js';
import { errorMessage } from '../errors.js';
import type { ProcessIdentity } from '../process/process-identity.js';
import { systemdUnitName } from '../systemd/unit-name.js';
import { type EngineWatch, parseEngineWatch } from '../engine-watch.js';
import type { ShardFieldProblem } from '../shard-field-problem.js';
import { shardFieldProblems, textFieldProblem } from '../shard-field-problems.js';
import { type CheckedStartShard, isValidShardId, type ShardId } from '../shard-id.js';

/** Longest knownAnswer read back: the agent records at most 512 characters. */
const KNOWN_ANSWER_FILE_MAX_CHARS = 1024;
/** Longest knownAnswerToken read back: the agent records at most 64 characters. */
const KNOWN_TOKEN_FILE_MAX_CHARS = 128;

/** The store's content digest (loader-snapshot.ts), as a state file may hold it. */
const MODEL_DIGEST_FORM = /^sha256:[0-9a-f]{64}$/;

/** Bump when a field changes meaning; readers refuse versions they do not know. */
export const STATE_SCHEMA_VERSION = 1;

/**
 * One engine as the agent knows it: what it launched (or found) and how it
 * judges it. The runner is built from it and the state file stores it as is,
 * so that what an adopting agent reads back is what the launching one held.
 */
export interface EngineRecord {
  shardId: ShardId;
  replicaId: string;
  spec: CheckedStartShard;
  servesHttp: boolean;
  /** How the engine is judged: probe port, path and limit, the series a drain and stall detection read. */
  watch: EngineWatch;
  /**
   * An operator or the control plane drained the shard: a restarted agent
   * must bring it back DRAINING, not READY, or traffic returns to an engine
   * that was being emptied for maintenance. Absent in files of older agents: false.
   */
  drainRequested?: boolean;
  /**
   * The level (1 or 2) of a SleepShard the engine was put to sleep at, and
   * not woken since: a restarted agent must adopt it SLEEPING, not READY, or
   * traffic goes to an engine without its weights (issue 30). Absent (or 0)
   * when awake, and in files of older agents.
   */
  sleepLevel?: number;
  /**
   * MiB the shard's GPUs held when it was put to sleep: what a wake waits to
   * see again, and how a restarted agent tells an SGLang engine that was
   * never released (the agent died between recording the sleep and the
   * release) from one that was. Written with sleepLevel; absent when awake,
   * in files of older agents, and when invalid (unknown, never a refusal).
   */
  sleepAwakeMib?: number;
  /**
   * The engine's greedy answer to the known-answer prompt, recorded at its
   * first READY (issue 36): a wake is READY only when the engine gives it
   * again, so an agent restarted while the shard sleeps can still tell a
   * woken engine from one answering garbage. Absent before it is recorded,
   * in files of older agents, and when invalid (unknown, never a refusal).
   */
  knownAnswer?: string;
  /** The known answer's first token as the engine names it ("token_id:N" on vLLM): its top-5 fallback compares it. */
  knownAnswerToken?: string;
  /**
   * The engine's version as it answered at its READY (vLLM `GET /version`,
   * SGLang `GET /server_info`'s `version`; engine-version.ts): which sleeps it
   * survives (sleep-survival.ts). Absent before it is read, in files of older
   * agents, and when invalid (unknown: a sleep that needs it is refused).
   */
  engineVersion?: string;
  /**
   * MiB of weights the engine keeps pinned in host RAM from its first sleep
   * for the rest of its life (SGLang's CPU backup, EngineSleepApi.hostCopyKept):
   * its later sleeps need no room for it. Absent before a first sleep.
   */
  hostCopyMib?: number;
  /**
   * The content digest of the model the engine was started on from the
   * node's store (issue 51): with the profile (in spec) and engineVersion,
   * the key of the node's known answer, so an agent restarted while it
   * serves asks it of the adopted engine before READY, as at a start.
   * Absent for a start not from the store, in files of older agents, and
   * when invalid (unknown: the adoption is not checked, never refused).
   */
  modelDigest?: string;
  pid: number;
  pgid: number;
  identity: ProcessIdentity;
  /** How the engine was launched; the agent config's `launcher`, spelled out here because lib sits below the agent. */
  launcher: 'direct' | 'systemd-run';
  /** The engine's systemd unit and the InvocationID of its run (systemd-run launcher only): what identifies it after a restart. */
  unit?: { name: string; invocationId: string };
  logPath: string;
  createdAtMs: number;
}

/**
 * What survives the agent about one shard: its EngineRecord, with the schema
 * version and the two metric names an older agent reads. `watch` is absent
 * in files of older agents, which kept only those two names: the reader of
 * the file derives it then (legacyWatch).
 */
export interface ShardStateFile extends Omit<EngineRecord, 'watch'> {
  schemaVersion: number;
  inFlightMetric: string;
  /** The engine's generation-token counter ('' when it has none), read for stall detection. Absent in files of older agents: ''. */
  generationTokensMetric?: string;
  watch?: EngineWatch;
}

/** The state file of `record`: the first of each series for an older agent that reads it after a downgrade. */
export function stateFileOf(record: EngineRecord): ShardStateFile {
  return {
    ...record,
    schemaVersion: STATE_SCHEMA_VERSION,
    inFlightMetric: record.watch.runningGauges[0] ?? '',
    generationTokensMetric: record.watch.progressCounters[0] ?? '',
  };
}

function toDisk(s: ShardStateFile): JsonValue {
  return {
    schemaVersion: s.schemaVersion,
    shardId: s.shardId,
    replicaId: s.replicaId,
    spec: toJson(StartShardSchema, s.spec),
    servesHttp: s.servesHttp,
    inFlightMetric: s.inFlightMetric,
    generationTokensMetric: s.generationTokensMetric ?? '',
    // Plain data (strings, numbers, booleans and their arrays and records; the sleep API's optional bodies are left out when absent).
    ...(s.watch ? { watch: { ...s.watch } as unknown as JsonValue } : {}),
    drainRequested: s.drainRequested ?? false,
    // Written only while asleep: the file of an awake engine is what it was before sleep mode.
    ...(s.sleepLevel ? { sleepLevel: s.sleepLevel } : {}),
    ...(s.sleepLevel && s.sleepAwakeMib ? { sleepAwakeMib: s.sleepAwakeMib } : {}),
    ...(s.knownAnswer !== undefined ? { knownAnswer: s.knownAnswer } : {}),
    ...(s.knownAnswerToken !== undefined ? { knownAnswerToken: s.knownAnswerToken } : {}),
    ...(s.engineVersion !== undefined ? { engineVersion: s.engineVersion } : {}),
    ...(s.hostCopyMib ? { hostCopyMib: s.hostCopyMib } : {}),
    ...(s.modelDigest ? { modelDigest: s.modelDigest } : {}),
    pid: s.pid,
    pgid: s.pgid,
    identity: { startTime: s.identity.startTime, bootId: s.identity.bootId },
    launcher: s.launcher,
    ...(s.unit ? { unit: { name: s.unit.name, invocationId: s.unit.invocationId } } : {}),
    logPath: s.logPath,
    createdAtMs: s.createdAtMs,
  };
}

/**
 * Writes the state file so that a crash at any moment leaves either the old
 * file or the new one, never half of one (see writeFileAtomic). A half-written file would make a healthy engine
 * unidentifiable after a power cut, and unidentifiable engines are killed.
 */
export async function writeStateFile(path: string, s: ShardStateFile): Promise<void> {
  // Judged again where it is written, not only at the start (security review 4, F3): a folder on the way
  // made writable or re-linked since names pids for root to signal; a few lstats.
  assertTrustedDirectory(dirname(path), 'supervisor.state_dir');
  await writeFileAtomic(path, `${JSON.stringify(toDisk(s), null, 2)}\n`);
}

/**
 * Rewrites one shard's state file with `change` applied, atomically: the
 * file is read and validated first, so a change never turns a file this
 * agent could not read into one it can (nor writes a half-known one back).
 * The shard's runner is the only writer after launch, so read-then-write
 * cannot lose another writer's change.
 */
export async function updateStateFile(path: string, shardId: string, change: Partial<Pick<ShardStateFile, 'drainRequested' | 'sleepLevel' | 'sleepAwakeMib' | 'knownAnswer' | 'knownAnswerToken' | 'engineVersion' | 'hostCopyMib'>>): Promise<void> {
  const read = await readStateFile(path, shardId);
  if (!read.ok) throw new Error(read.reason);
  await writeStateFile(path, { ...read.file, ...change });
}

/**
 * A file is refused (ok: false) only when it cannot identify or describe its
 * engine, which is then killed as unidentifiable. `refused` lists fields an
 * older agent kept that StartShard now refuses: the file still identifies its
 * engine, and `file` holds the spec without them (see dropRefusedFields).
 */
export type StateFileRead = { ok: true; file: ShardStateFile; refused: ShardFieldProblem[] } | { ok: false; reason: string };

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Reads and validates a state file. Opened with O_NOFOLLOW: a symlink planted
 * in the state directory could otherwise make the agent adopt (and later
 * signal) whatever the link points at. Anything short of a complete, valid,
 * current-version file is a reason, never a guess.
 */
export async function readStateFile(path: string, expectedShardId: string): Promise<StateFileRead> {
  let text: string;
  try {
    const fh = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    try {
      if (!(await fh.stat()).isFile()) return { ok: false, reason: 'state file is not a regular file' };
      text = await fh.readFile('utf8');
    } finally {
      await fh.close();
    }
  } catch (err) {
    return { ok: false, reason: openFailureReason(err) };
  }

  return parseStateText(text, expectedShardId);
}

function openFailureReason(err: unknown): string {
  const code = errnoCode(err);
  if (code === 'ELOOP') return 'state file is a symlink; refused';
  // An engine running with no state file: the agent died between launching it and recording it.
  if (code === 'ENOENT') return 'no state file records this engine';
  return `state file unreadable: ${errorMessage(err)}`;
}

/** Validates the text of a state file; a reason for anything short of a complete, current-version file. */
export function parseStateText(text: string, expectedShardId: string): StateFileRead {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    return { ok: false, reason: `state file is not valid JSON (truncated or corrupt): ${errorMessage(err)}` };
  }
  if (!isObject(raw)) return { ok: false, reason: 'state file does not hold a JSON object' };
  if (raw.schemaVersion !== STATE_SCHEMA_VERSION) {
    return {
      ok: false,
      reason: `state file schema version ${JSON.stringify(raw.schemaVersion)} is not supported (this agent reads ${STATE_SCHEMA_VERSION})`,
    };
  }
  const identity = raw.identity;
  const bad = (field: string) => ({ ok: false as const, reason: `state file field ${field} is missing or invalid` });
  // The state file's edge: the id it must hold is checked here, once (it names the engine's files and unit).
  if (!isValidShardId(expectedShardId) || raw.shardId !== expectedShardId) return bad('shardId');
  if (typeof raw.replicaId !== 'string') return bad('replicaId');
  if (typeof raw.servesHttp !== 'boolean') return bad('servesHttp');
  if (typeof raw.inFlightMetric !== 'string') return bad('inFlightMetric');
  // Optional, added without a version bump: an older agent's file lacks them and means ''/false.
  if (raw.generationTokensMetric !== undefined && typeof raw.generationTokensMetric !== 'string') return bad('generationTokensMetric');
  if (raw.drainRequested !== undefined && typeof raw.drainRequested !== 'boolean') return bad('drainRequested');
  if (raw.sleepLevel !== undefined && raw.sleepLevel !== 0 && raw.sleepLevel !== 1 && raw.sleepLevel !== 2) return bad('sleepLevel');
  const watch = raw.watch === undefined ? undefined : parseEngineWatch(raw.watch);
  if (watch && !watch.ok) return bad(watch.field);
  if (!Number.isInteger(raw.pid) || (raw.pid as number) <= 1) return bad('pid');
  if (!Number.isInteger(raw.pgid) || (raw.pgid as number) <= 1) return bad('pgid');
  // Both launchers make the engine the leader of its own group (setsid), so
  // a pgid that is not the pid was not written by this agent. Trusted apart
  // from the identity-checked pid, a forged one had the agent SIGTERM an
  // unrelated process group (finding 10 of the security review).
  if (raw.pgid !== raw.pid) {
    return { ok: false, reason: `state file field pgid ${raw.pgid} is not the engine's pid ${raw.pid} (engines lead their own process group); refused` };
  }
  if (!isObject(identity) || typeof identity.startTime !== 'string' || !/^\d+$/.test(identity.startTime)) {
    return bad('identity.startTime');
  }
  if (typeof identity.bootId !== 'string' || identity.bootId === '') return bad('identity.bootId');
  if (raw.launcher !== 'direct' && raw.launcher !== 'systemd-run') return bad('launcher');
  const unit = raw.unit;
  if (unit !== undefined && (!isObject(unit) || unit.name !== systemdUnitName(expectedShardId) || typeof unit.invocationId !== 'string' || !/^[0-9a-f]{32}$/.test(unit.invocationId))) {
    return bad('unit');
  }
  if (typeof raw.logPath !== 'string') return bad('logPath');
  if (typeof raw.createdAtMs !== 'number') return bad('createdAtMs');
  let spec: StartShard;
  try {
    spec = fromJson(StartShardSchema, raw.spec as JsonValue);
  } catch (err) {
    return { ok: false, reason: `state file field spec is invalid: ${errorMessage(err)}` };
  }
  // The runner takes its id from the spec: a forged file naming another id there ("../x") would be adopted under it.
  if (spec.shardId !== expectedShardId) return bad('spec.shardId');
  const refused = dropRefusedFields(spec);
  // The file keeps the replica id beside the spec's, the same but for a forged file: named once.
  const replicaProblem = textFieldProblem('replica_id', raw.replicaId);
  if (replicaProblem && !refused.some((p) => p.field === 'replica_id')) refused.unshift(replicaProblem);
  return {
    ok: true,
    refused,
    file: {
      schemaVersion: STATE_SCHEMA_VERSION,
      shardId: expectedShardId,
      replicaId: replicaProblem ? '' : raw.replicaId,
      spec: spec as CheckedStartShard,
      servesHttp: raw.servesHttp,
      inFlightMetric: raw.inFlightMetric,
      generationTokensMetric: raw.generationTokensMetric ?? '',
      ...(watch?.ok ? { watch: watch.watch } : {}),
      drainRequested: raw.drainRequested ?? false,
      ...(raw.sleepLevel ? { sleepLevel: raw.sleepLevel } : {}),
      // A figure to compare readings with, not an identity: an invalid one is unknown, never a reason to refuse the engine.
      ...(raw.sleepLevel && Number.isSafeInteger(raw.sleepAwakeMib) && (raw.sleepAwakeMib as number) > 0 ? { sleepAwakeMib: raw.sleepAwakeMib as number } : {}),
      // Likewise a reference to compare with: one too long or not text is unknown.
      ...(typeof raw.knownAnswer === 'string' && raw.knownAnswer.length <= KNOWN_ANSWER_FILE_MAX_CHARS ? { knownAnswer: raw.knownAnswer } : {}),
      ...(typeof raw.knownAnswerToken === 'string' && raw.knownAnswerToken.length <= KNOWN_TOKEN_FILE_MAX_CHARS ? { knownAnswerToken: raw.knownAnswerToken } : {}),
      // Facts read of the engine: an invalid one is unknown (a sleep needing it is refused), never a reason to refuse the engine.
      ...(typeof raw.engineVersion === 'string' && /^[\w.+-]{1,64}$/.test(raw.engineVersion) ? { engineVersion: raw.engineVersion } : {}),
      ...(Number.isSafeInteger(raw.hostCopyMib) && (raw.hostCopyMib as number) > 0 ? { hostCopyMib: raw.hostCopyMib as number } : {}),
      // A key to look an answer up by: one not of the store's form is unknown (the adoption is not checked).
      ...(typeof raw.modelDigest === 'string' && MODEL_DIGEST_FORM.test(raw.modelDigest) ? { modelDigest: raw.modelDigest } : {}),
      pid: raw.pid as number,
      pgid: raw.pgid as number,
      identity: { startTime: identity.startTime, bootId: identity.bootId },
      launcher: raw.launcher,
      ...(isObject(unit) ? { unit: { name: unit.name as string, invocationId: unit.invocationId as string } } : {}),
      logPath: raw.logPath,
      createdAtMs: raw.createdAtMs,
    },
  };
}

/**
 * Empties, in `spec`, the fields StartShard refuses (shardFieldProblems) and
 * returns them. An agent before that rule kept them: a 12 MiB pool made every
 * later Register too large for a gRPC control plane (4 MiB), so the node
 * never registered again (security review 2, N6). The file is not refused for
 * them: its engine is still identified by pid, start time and boot id, and a
 * refused file has a healthy engine killed as unidentifiable.
 *
 * pool, fabric, leader_addr, hcas (the whole list: an entry in NCCL's
 * selector syntax made the list mean something else), replica_id and
 * profile.name only describe the engine once it runs, so they are dropped.
 * profile.model and profile.served_model_name are kept: the engine answers
 * to them, and an adopted engine's readiness check asks /v1/models for the
 * served name, so dropping them would fail a healthy engine. Register carries
 * neither beyond the rule (runningShardFromSnapshot).
 */
function dropRefusedFields(spec: StartShard): ShardFieldProblem[] {
  const problems = shardFieldProblems(spec);
  for (const { field } of problems) {
    if (field === 'replica_id') spec.replicaId = '';
    else if (field === 'profile.name' && spec.profile) spec.profile.name = '';
    else if (field === 'pool') spec.pool = '';
    else if (field === 'fabric') spec.fabric = '';
    else if (field === 'leader_addr') spec.leaderAddr = '';
    else if (field.startsWith('hcas')) spec.hcas = [];
    // A gang this agent would not accept is not watched: the shard runs on unwatched, as one from an older agent.
    else if (field.startsWith('gang')) spec.gang = undefined;
  }
  return problems;
}

/** readStateFile for callers that must stay synchronous. */
export function readStateFileSync(path: string, expectedShardId: string): StateFileRead {
  let text: string;
  try {
    const fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    try {
      if (!fstatSync(fd).isFile()) return { ok: false, reason: 'state file is not a regular file' };
      text = readFileSync(fd, 'utf8');
    } finally {
      closeSync(fd);
    }
  } catch (err) {
    return { ok: false, reason: openFailureReason(err) };
  }
  return parseStateText(text, expectedShardId);
}

/**
 * unlink() removes a symlink itself, never its target. Missing is fine.
 * Something that unlink() cannot remove (a directory where a state file
 * should be) is renamed aside with a `.refused-<ms>` suffix, which is no
 * state file name: left in place, it made every later start of the shard
 * fail on it (found by the fault campaign).
 */
export async function removeStateFile(path: string): Promise<void> {
  try {
    await unlink(path);
  } catch (err) {
    const code = errnoCode(err);
    if (code === 'ENOENT') return;
    if (code !== 'EISDIR' && code !== 'EPERM') throw err;
    await rename(path, `${path}.refused-${Date.now()}`);
  }
}
