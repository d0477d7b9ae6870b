import { create } from '@bufbuild/protobuf';
import { durationMs } from '@bufbuild/protobuf/wkt';
import { Code, ConnectError, type ConnectRouter, type HandlerContext } from '@connectrpc/connect';
import {
  AdminService,
  AdoptOutcome,
  AdoptResponseSchema,
  AdoptResultSchema,
  type DrainRequest,
  type DrainResponse,
  type LogsRequest,
  type LogsResponse,
  LogsResponseSchema,
} from '../../gen/llmgw/v1/admin_pb.js';
import { ShardState } from '../../gen/llmgw/v1/agent_pb.js';
import { type ErrorKind, errorMessage, LlmgwError } from '../../lib/errors.js';
import { isValidShardId, SHARD_ID_PATTERN } from '../../lib/shard-id.js';
import type { AdoptOutcomeKind } from '../agent.js';
import { isTerminal } from '../../lib/shard-states.js';
import { stateName } from '../supervisor/shard-transitions.js';
import type { AdminBackend } from './admin-backend.js';
import { buildStatusResponse } from './build-status-response.js';
import { DEFAULT_DRAIN_TIMEOUT_MS, streamDrainProgress } from './stream-drain-progress.js';
import { unknownShardError } from './unknown-shard-error.js';

/** `ctl logs` without -n. */
export const DEFAULT_LOG_LINES = 100;
/** Lines per LogsResponse: a 100,000-line tail is sent as many small messages, not one huge one. */
export const LOG_LINES_PER_MESSAGE = 1000;

/** What a drain may name: the states that serve (DRAINING again is a no-op that shows progress). */
const DRAINABLE: ReadonlySet<ShardState> = new Set([ShardState.READY, ShardState.UNHEALTHY, ShardState.DRAINING]);
/** What a drain --cancel may name: only a drained shard has a drain to undo. */
const CANCELLABLE: ReadonlySet<ShardState> = new Set([ShardState.DRAINING]);

/**
 * The Connect code for each kind of LlmgwError, so ctl maps it back to the
 * right exit status (admin-call-error.ts): a bad request is InvalidArgument
 * (exit 2), a runtime condition such as a shard in the wrong state is
 * FailedPrecondition (exit 1), never a usage error. Anything that is not an
 * LlmgwError is a bug: Internal.
 */
const CONNECT_CODE_BY_KIND: Record<ErrorKind, Code> = {
  usage: Code.InvalidArgument,
  failure: Code.FailedPrecondition,
  config: Code.FailedPrecondition,
  permission: Code.PermissionDenied,
  unreachable: Code.Unavailable,
};

export function toConnectError(err: unknown): ConnectError {
  if (err instanceof ConnectError) return err;
  if (err instanceof LlmgwError) return new ConnectError(err.message, CONNECT_CODE_BY_KIND[err.kind]);
  return new ConnectError(errorMessage(err), Code.Internal);
}

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
  return (router) =>
    router.service(AdminService, {
      status: () => buildStatusResponse(backend),

      logs: (req, ctx) => streamLogs(backend, req, ctx),

      adopt: async () => {
        const results = await backend.adoptNow();
        return create(AdoptResponseSchema, {
          results: results.map((r) => create(AdoptResultSchema, { ...r, outcome: ADOPT_OUTCOMES[r.outcome] })),
        });
      },

      drain: (req, ctx) => drain(backend, req, ctx, opts),
    });
}

function requireShardId(id: string): void {
  if (!isValidShardId(id)) {
    throw new ConnectError(`invalid shard id ${JSON.stringify(String(id).slice(0, 40))}: it must match ${SHARD_ID_PATTERN.source}`, Code.InvalidArgument);
  }
}

async function* streamLogs(backend: AdminBackend, req: LogsRequest, ctx: HandlerContext): AsyncGenerator<LogsResponse> {
  requireShardId(req.shardId);
  if (req.previous) {
    yield* streamPreviousLog(backend, req);
    return;
  }
  if (!backend.shard(req.shardId)) throw unknownShardError(req.shardId, backend.nodeId, backend.shards());
  if (req.lines < 0) throw new ConnectError(`lines must be 0 or more, got ${req.lines}`, Code.InvalidArgument);
  const lines = req.lines === 0 ? DEFAULT_LOG_LINES : req.lines;
  // With follow, the tail is the follow's first batch, read at the same point
  // the follow starts from: no line shows twice or goes missing in between.
  const stop = new AbortController();
  const follow = req.follow ? backend.followLog(req.shardId, AbortSignal.any([ctx.signal, stop.signal]), lines)[Symbol.asyncIterator]() : undefined;
  try {
    const first = follow ? await follow.next() : undefined;
    const tail = follow ? (first?.done ? [] : (first?.value ?? [])) : await backend.tailLog(req.shardId, lines);
    for (let i = 0; i < tail.length; i += LOG_LINES_PER_MESSAGE) {
      yield create(LogsResponseSchema, { lines: tail.slice(i, i + LOG_LINES_PER_MESSAGE) });
    }
    if (!follow) return;
    if (!first?.done) {
      // Something goes out now even for an empty log, so the client knows the follow has started.
      if (tail.length === 0) yield create(LogsResponseSchema, { lines: [] });
      for (let next = await follow.next(); !next.done; next = await follow.next()) {
        if (next.value.length > 0) yield create(LogsResponseSchema, { lines: next.value });
      }
    }
    // A follow ends quietly both when the shard is removed and when the agent
    // stops; the client must not be told "removed" for the second.
    if (backend.shard(req.shardId)) {
      throw new ConnectError('the agent is stopping; the log can still be read from its file', Code.Unavailable);
    }
  } finally {
    // Wakes a pending read at once: return() on a generator waits for it.
    stop.abort();
    await follow?.return?.(undefined).catch(() => {});
  }
}

/** A shard's previous run, also of a shard no longer supervised: its log outlives it. */
async function* streamPreviousLog(backend: AdminBackend, req: LogsRequest): AsyncGenerator<LogsResponse> {
  if (req.follow) throw new ConnectError('previous and follow do not go together: the previous run has ended', Code.InvalidArgument);
  if (req.lines < 0) throw new ConnectError(`lines must be 0 or more, got ${req.lines}`, Code.InvalidArgument);
  const tail = await backend.tailPreviousLog(req.shardId, req.lines === 0 ? DEFAULT_LOG_LINES : req.lines);
  if (!tail) {
    throw new ConnectError(
      `no previous run of shard ${req.shardId} is kept: a run's log is kept when the same shard id is started again`,
      Code.NotFound,
    );
  }
  for (let i = 0; i < tail.length; i += LOG_LINES_PER_MESSAGE) {
    yield create(LogsResponseSchema, { lines: tail.slice(i, i + LOG_LINES_PER_MESSAGE) });
  }
}

async function* drain(backend: AdminBackend, req: DrainRequest, ctx: HandlerContext, opts: AdminRoutesOptions): AsyncGenerator<DrainResponse> {
  if (req.all === (req.shardId !== '')) {
    throw new ConnectError('name one shard or set all, not both and not neither', Code.InvalidArgument);
  }
  if (req.cancel && req.wait) throw new ConnectError('cancel and wait do not go together: a cancelled drain has nothing to wait for', Code.InvalidArgument);
  const allowed = req.cancel ? CANCELLABLE : DRAINABLE;
  let ids: string[];
  if (req.all) {
    // Only what serves (with cancel, only what is drained): a STARTING shard
    // has no traffic to move, a terminal one no process.
    ids = backend
      .shards()
      .filter((s) => allowed.has(s.state))
      .map((s) => s.shardId)
      .sort();
  } else {
    requireShardId(req.shardId);
    const shard = backend.shard(req.shardId);
    if (!shard) throw unknownShardError(req.shardId, backend.nodeId, backend.shards());
    if (isTerminal(shard.state)) {
      throw new ConnectError(`shard ${req.shardId} is ${stateName(shard.state)}: there is nothing to drain`, Code.FailedPrecondition);
    }
    // A runtime condition, not a bad request: decided here, so that it is
    // FailedPrecondition (ctl exit 1) whatever kind the supervisor throws.
    if (!allowed.has(shard.state)) {
      const only = req.cancel ? 'only a DRAINING shard can have its drain cancelled' : 'only a READY or UNHEALTHY shard can be drained';
      throw new ConnectError(`shard ${req.shardId} is ${stateName(shard.state)}: ${only}`, Code.FailedPrecondition);
    }
    ids = [req.shardId];
  }
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
