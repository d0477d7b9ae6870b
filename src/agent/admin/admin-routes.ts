import { REPORTED_SHARD_STATES, SHARD_STATES } from '../../lib/shard-states.js';
import { create } from '@bufbuild/protobuf';
import { durationMs } from '@bufbuild/protobuf/wkt';
import { Code, ConnectError, type ConnectRouter, type HandlerContext } from '@connectrpc/connect';
import {
  AdaptersResponseSchema,
  AdminService,
  AdoptOutcome,
  ChangeAdaptersResponseSchema,
  AdoptResponseSchema,
  AdoptResultSchema,
  type DrainRequest,
  type DrainResponse,
  type LogsRequest,
  type LogsResponse,
  LogsResponseSchema,
} from '../../gen/llmgw/v1/admin_pb.js';
import type { ShardState } from '../../gen/llmgw/v1/agent_pb.js';
import { toConnectError } from './connect-error.js';
import { MAX_LOG_LINES } from '../../lib/max-log-lines.js';
import { isValidShardId, SHARD_ID_PATTERN, type ShardId } from '../../lib/shard-id.js';
import type { AdoptOutcomeKind } from '../recover-engines.js';
import { isTerminal } from '../../lib/shard-states.js';
import { stateName } from '../../lib/shard-states.js';
import type { AdminBackend } from './admin-backend.js';
import { ADMIN_PEER } from './admin-peer.js';
import { buildStatusResponse } from './build-status-response.js';
import { clearGpuFault } from './clear-gpu-fault.js';
import { cordonRoute } from './cordon-route.js';
import { auditAct } from './operator-audit.js';
import { sleepRoute, wakeRoute } from './sleep-route.js';
import { adaptersRoute } from './adapters-route.js';
import { eventsRoute } from './events-route.js';
import { type Claimed, LogCallAdmission, type LogSlotKind } from './log-call-admission.js';
import { DEFAULT_DRAIN_TIMEOUT_MS, streamDrainProgress } from './stream-drain-progress.js';
import { unknownShardError } from './unknown-shard-error.js';
import { chosenRunLog, type KeptLog, keptShardLog, mtimeMs, requestedShape, requireReplicaId } from './kept-logs.js';
import { filterStatusShards } from './status-shard-filter.js';
import { type LogLineShape, LogLineShaper } from '../../lib/files/log-line-shaper.js';
import { tailLines } from '../../lib/files/tail-file.js';

/** `ctl logs` without -n. */
export const DEFAULT_LOG_LINES = 100;
/** Lines per LogsResponse: a long tail is sent as many small messages, not one huge one. */
export const LOG_LINES_PER_MESSAGE = 1000;

/** What a drain may name: the states that serve (DRAINING again is a no-op that shows progress). */
const DRAINABLE: ReadonlySet<ShardState> = new Set(REPORTED_SHARD_STATES.filter((s) => SHARD_STATES[s].drainable));
/** What a drain --cancel may name: only a drained shard has a drain to undo. */
const CANCELLABLE: ReadonlySet<ShardState> = new Set(REPORTED_SHARD_STATES.filter((s) => SHARD_STATES[s].cancellable));

export interface AdminRoutesOptions {
  drainPollMs?: number;
}

const ADOPT_OUTCOMES: Record<AdoptOutcomeKind, AdoptOutcome> = {
  adopted: AdoptOutcome.ADOPTED,
  killed: AdoptOutcome.KILLED,
  cleaned: AdoptOutcome.CLEANED,
  'already-supervised': AdoptOutcome.ALREADY_SUPERVISED,
  error: AdoptOutcome.ERROR,
};

/** AdminService over an agent. Handlers watch ctx.signal: it aborts when the client goes away and when the server shuts down. */
export function adminRoutes(backend: AdminBackend, opts: AdminRoutesOptions = {}): (router: ConnectRouter) => void {
  // One for all of the server's calls: the caps are on what runs at once.
  const logCalls = new LogCallAdmission();
  const streamEvents = eventsRoute(backend);
  return (router) =>
    router.service(AdminService, {
      status: (req) => filterStatusShards(buildStatusResponse(backend, { foreignMemoryShare: backend.foreignMemoryShare }), req, backend.shards()),

      logs: (req, ctx) => endedWithClient(streamLogs(backend, logCalls, req, ctx), ctx.signal),

      adopt: async (_req, ctx) => {
        auditAct(backend, ctx, { act: 'adopt' });
        const results = await backend.adoptNow();
        return create(AdoptResponseSchema, {
          results: results.map((r) => create(AdoptResultSchema, { ...r, outcome: ADOPT_OUTCOMES[r.outcome] })),
        });
      },

      drain: (req, ctx) => drain(backend, req, ctx, opts),
      clearGpuFault: (req, ctx) => clearGpuFault(backend, req, ctx),

      cordon: (req, ctx) => cordonRoute(backend, req, ctx),

      sleep: (req, ctx) => sleepRoute(backend, req, ctx),
      wake: (req, ctx) => wakeRoute(backend, req, ctx),
      adapters: async (req, ctx) => create(AdaptersResponseSchema, await adaptersRoute(backend, req, ctx, false)),
      changeAdapters: async (req, ctx) => create(ChangeAdaptersResponseSchema, await adaptersRoute(backend, req, ctx, true)),

      events: (req, ctx) => endedWithClient(streamEvents(req, ctx), ctx.signal),
    });
}

/** The socket's edge: a request's shard id, checked once here; everything behind takes the ShardId. */
function requireShardId(id: string): ShardId {
  if (!isValidShardId(id)) {
    throw new ConnectError(`invalid shard id ${JSON.stringify(String(id).slice(0, 40))}: it must match ${SHARD_ID_PATTERN.source}`, Code.InvalidArgument);
  }
  return id;
}

/** The lines a Logs request asks for: its number, or DEFAULT_LOG_LINES for 0 (proto3 cannot tell 0 from unset). */
function requestedLines(lines: number): number {
  if (lines < 0) throw new ConnectError(`lines must be 0 or more, got ${lines}`, Code.InvalidArgument);
  if (lines > MAX_LOG_LINES) {
    throw new ConnectError(`lines: at most ${MAX_LOG_LINES}, got ${lines}; read a longer history from the log file itself`, Code.InvalidArgument);
  }
  return lines === 0 ? DEFAULT_LOG_LINES : lines;
}

/**
 * `stream`, ended (its finally blocks run) as soon as `signal` aborts, also
 * while it waits for Connect to take its next message. Connect waits for a
 * write to a client that left with data unsent for ever: Node 20 neither
 * calls that write back nor emits an error when the HTTP/2 stream is reset,
 * only 'close'. A Logs handler then kept its file, its buffer and its slot
 * for every client that stopped reading and left.
 */
function endedWithClient<T>(stream: AsyncGenerator<T>, signal: AbortSignal): AsyncGenerator<T> {
  // return() on a generator suspended at a yield resumes it there with a
  // return; on one that is running, it takes effect at its next yield, and
  // the signal makes every read it may be waiting on end first.
  signal.addEventListener('abort', () => void stream.return(undefined).catch(() => {}), { once: true });
  return stream;
}

/** A slot of `kind` for the caller, or the call refused naming the cap. */
function claimLogSlot(logCalls: LogCallAdmission, kind: LogSlotKind, ctx: HandlerContext): Claimed {
  const claimed = logCalls.claim(kind, ctx.values.get(ADMIN_PEER)?.uid);
  if ('why' in claimed) {
    const wait = kind === 'follow' ? 'end a `ctl logs -f` of this user' : 'wait for one to end';
    throw new ConnectError(`the agent refused the Logs call: ${claimed.why}; ${wait} and try again`, Code.ResourceExhausted);
  }
  return claimed;
}

/** One batch of lines as messages of at most LOG_LINES_PER_MESSAGE lines. */
function* messagesOf(lines: string[]): Generator<LogsResponse> {
  for (let i = 0; i < lines.length; i += LOG_LINES_PER_MESSAGE) {
    yield create(LogsResponseSchema, { lines: lines.slice(i, i + LOG_LINES_PER_MESSAGE) });
  }
}

/**
 * A Logs call, bounded (security review 2, N3): at most MAX_LOG_LINES
 * lines, read and sent a chunk at a time (the read stops when the client
 * leaves), and only a few at once per user (LogCallAdmission).
 */
async function* streamLogs(backend: AdminBackend, logCalls: LogCallAdmission, req: LogsRequest, ctx: HandlerContext): AsyncGenerator<LogsResponse> {
  const replicaId = req.replicaId === '' ? undefined : requireReplicaId(req.replicaId);
  // With a replica the shard id may be left out: the replica names the runs.
  const id = replicaId !== undefined && req.shardId === '' ? undefined : requireShardId(req.shardId);
  if (req.previous && req.follow) throw new ConnectError('previous and follow do not go together: the previous run has ended', Code.InvalidArgument);
  if (replicaId !== undefined && req.follow) {
    throw new ConnectError('replica_id and follow do not go together: follow the current shard by its id (ctl status lists it)', Code.InvalidArgument);
  }
  const lines = requestedLines(req.lines);
  const shape = requestedShape(req);
  if (id !== undefined && req.previous && replicaId === undefined && !backend.logDir) {
    yield* streamPreviousLog(backend, logCalls, id, lines, ctx);
    return;
  }
  if (id === undefined || req.previous || replicaId !== undefined) {
    yield* streamKeptLog(logCalls, chosenRunLog(backend, { shardId: id, replicaId, previous: req.previous }), lines, shape, ctx);
    return;
  }
  const shard = backend.shard(id);
  if (!shard) {
    // A generation that crashed and was forgotten, or replaced under a new id: its log outlives it.
    const kept = keptShardLog(backend, id);
    if (!kept) {
      const unknown = unknownShardError(id, backend.nodeId, backend.shards());
      throw backend.logDir ? new ConnectError(`${unknown.rawMessage}; and no log of it is kept in ${backend.logDir}/shards`, unknown.code) : unknown;
    }
    if (req.follow) {
      throw new ConnectError(`shard ${id} is no longer supervised on node ${backend.nodeId}: its run has ended; read its kept log without --follow`, Code.FailedPrecondition);
    }
    yield* streamKeptLog(logCalls, kept, lines, shape, ctx);
    return;
  }
  if (req.follow) {
    yield* followLog(backend, logCalls, id, lines, shape, ctx);
    return;
  }
  const shaper = new LogLineShaper(shape, mtimeMs(shard.logPath));
  const read = claimLogSlot(logCalls, 'read', ctx);
  try {
    for await (const batch of backend.logLines(id, lines, ctx.signal)) yield* messagesOf(shaper.apply(batch));
  } finally {
    read.release();
  }
}

/** A kept log file's last lines: a shard no longer supervised, or a run chosen by replica or --previous. */
async function* streamKeptLog(logCalls: LogCallAdmission, log: KeptLog, lines: number, shape: LogLineShape, ctx: HandlerContext): AsyncGenerator<LogsResponse> {
  const shaper = new LogLineShaper(shape, mtimeMs(log.path));
  const read = claimLogSlot(logCalls, 'read', ctx);
  try {
    for await (const batch of tailLines(log.path, lines, { signal: ctx.signal })) yield* messagesOf(shaper.apply(batch));
  } finally {
    read.release();
  }
}

/** `logs -f`: the tail, then new lines until the shard is removed, the client leaves or the agent stops. */
async function* followLog(
  backend: AdminBackend,
  logCalls: LogCallAdmission,
  shardId: ShardId,
  lines: number,
  shape: LogLineShape,
  ctx: HandlerContext,
): AsyncGenerator<LogsResponse> {
  // The backlog's lines carry what time they carry; a new line with none has the time the agent read it.
  const shaper = new LogLineShaper(shape, mtimeMs(backend.shard(shardId)?.logPath ?? ''));
  const following = claimLogSlot(logCalls, 'follow', ctx);
  let read: Claimed | undefined;
  const stop = new AbortController();
  let follow: AsyncIterator<string[]> | undefined;
  try {
    read = claimLogSlot(logCalls, 'read', ctx);
    // The tail is the follow's backlog, read at the same point the follow
    // starts from: no line shows twice or goes missing in between. It is
    // the batches before the first empty one.
    follow = backend.followLog(shardId, AbortSignal.any([ctx.signal, stop.signal]), lines)[Symbol.asyncIterator]();
    let sent = 0;
    let next = await follow.next();
    for (; !next.done && next.value.length > 0; next = await follow.next()) {
      const shaped = shaper.apply(next.value);
      sent += shaped.length;
      yield* messagesOf(shaped);
    }
    read.release();
    if (!next.done) {
      // Something goes out now even for an empty log, so the client knows the follow has started.
      if (sent === 0) yield create(LogsResponseSchema, { lines: [] });
      for (next = await follow.next(); !next.done; next = await follow.next()) yield* messagesOf(shaper.apply(next.value, Date.now()));
    }
    // A follow ends quietly both when the shard is removed and when the agent
    // stops; the client must not be told "removed" for the second.
    if (backend.shard(shardId)) {
      throw new ConnectError('the agent is stopping; the log can still be read from its file', Code.Unavailable);
    }
  } finally {
    read?.release();
    following.release();
    // Wakes a pending read at once: return() on a generator waits for it.
    stop.abort();
    await follow?.return?.(undefined).catch(() => {});
  }
}

/** A shard's previous run, also of a shard no longer supervised: its log outlives it. */
async function* streamPreviousLog(backend: AdminBackend, logCalls: LogCallAdmission, shardId: ShardId, lines: number, ctx: HandlerContext): AsyncGenerator<LogsResponse> {
  const tail = backend.previousLogLines(shardId, lines, ctx.signal);
  if (!tail) {
    throw new ConnectError(`no previous run of shard ${shardId} is kept: a run's log is kept when the same shard id is started again`, Code.NotFound);
  }
  const read = claimLogSlot(logCalls, 'read', ctx);
  try {
    for await (const batch of tail) yield* messagesOf(batch);
  } finally {
    read.release();
  }
}

async function* drain(backend: AdminBackend, req: DrainRequest, ctx: HandlerContext, opts: AdminRoutesOptions): AsyncGenerator<DrainResponse> {
  if (req.all === (req.shardId !== '')) {
    throw new ConnectError('name one shard or set all, not both and not neither', Code.InvalidArgument);
  }
  if (req.cancel && req.wait) throw new ConnectError('cancel and wait do not go together: a cancelled drain has nothing to wait for', Code.InvalidArgument);
  const allowed = req.cancel ? CANCELLABLE : DRAINABLE;
  let ids: ShardId[];
  if (req.all) {
    // Only what serves (with cancel, only what is drained): a STARTING shard
    // has no traffic to move, a terminal one no process.
    ids = backend
      .shards()
      .filter((s) => allowed.has(s.state))
      .map((s) => s.shardId)
      .sort();
  } else {
    const id = requireShardId(req.shardId);
    const shard = backend.shard(id);
    if (!shard) throw unknownShardError(id, backend.nodeId, backend.shards());
    if (isTerminal(shard.state)) {
      throw new ConnectError(`shard ${req.shardId} is ${stateName(shard.state)}: there is nothing to drain`, Code.FailedPrecondition);
    }
    // A runtime condition, not a bad request: decided here, so that it is
    // FailedPrecondition (ctl exit 1) whatever kind the supervisor throws.
    if (!allowed.has(shard.state)) {
      const only = req.cancel ? 'only a DRAINING shard can have its drain cancelled' : 'only a READY or UNHEALTHY shard can be drained';
      throw new ConnectError(`shard ${req.shardId} is ${stateName(shard.state)}: ${only}`, Code.FailedPrecondition);
    }
    ids = [id];
  }
  auditAct(backend, ctx, { act: req.cancel ? 'drain --cancel' : 'drain', shardId: req.all ? undefined : ids[0], detail: req.all ? `all: ${ids.length} shards` : undefined });
  for (const id of ids) {
    try {
      // Reported to the control plane by the supervisor's transition, so it routes elsewhere (or back, on cancel).
      if (req.cancel) await backend.cancelDrainShard(id);
      else await backend.drainShard(id);
    } catch (err) {
      throw toConnectError(err);
    }
  }
  yield* streamDrainProgress(backend, {
    shardIds: ids,
    wait: req.wait,
    timeoutMs: req.timeout ? durationMs(req.timeout) : DEFAULT_DRAIN_TIMEOUT_MS,
    signal: ctx.signal,
    pollMs: opts.drainPollMs,
  });
}
