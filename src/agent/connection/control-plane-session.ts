import { createClient, type Transport } from '@connectrpc/connect';
import { createWritableIterable } from '@connectrpc/connect/protocol';
import {
  AgentService,
  type AgentMessage,
  type ControlMessage,
  type Heartbeat,
  type Register,
} from '../../gen/llmgw/v1/agent_pb.js';
import { formatDuration } from '../../lib/duration.js';
import type { Logger } from '../../lib/logger.js';
import { RateLimitedLog } from '../../lib/rate-limited-log.js';
import { Outbox } from './outbox.js';
import { setTimeout as delay } from 'node:timers/promises';

/**
 * A stream whose outbox has taken nothing for this many heartbeats belongs to
 * a control plane that stopped reading (HTTP/2 pings are still answered): it
 * is dropped and redialled, and its backlog bounded meanwhile by the outbox.
 */
export const STALLED_OUTBOX_HEARTBEATS = 5;
/** The least time a stalled outbox is waited out, whatever the heartbeat. */
export const STALLED_OUTBOX_FLOOR_MS = 10_000;

/** How long the outbox may take nothing before the stream is dropped: stream_stall_timeout when set (more than 0), else derived from the heartbeat. */
export function stalledOutboxLimitMs(heartbeatIntervalMs: number, configuredMs = 0): number {
  return configuredMs > 0 ? configuredMs : Math.max(STALLED_OUTBOX_FLOOR_MS, STALLED_OUTBOX_HEARTBEATS * heartbeatIntervalMs);
}

/**
 * Control messages are not read while this many messages wait to be sent: a
 * control plane that floods commands without reading the answers is slowed
 * to the rate it reads, instead of growing the agent's memory.
 */
export const OUTBOX_HIGH_WATER = 256;
/**
 * The longest run of control messages handled without giving the event loop
 * a turn. One 64 KiB read holds thousands of small commands and the stream
 * hands them over in microtasks: handled in one go, they held the loop past
 * the HTTP/2 ping's timeout on a loaded 2-core machine, its timer fired
 * before the poll phase could read the control plane's answer, and the agent
 * dropped a control plane that was answering ("PING timed out" under 50k
 * repeated StopShards, test/security/control-plane-flood). Heartbeats,
 * health probes and the admin socket wait the same way.
 */
export const CONTROL_SLICE_MS = 20;

export interface SessionCallbacks {
  /** Built fresh for every session: it must list what runs now. */
  register(): Register;
  /** Called once Register is queued, with the outbox of this session. */
  onOpen(outbox: Outbox): void;
  onControlMessage(message: ControlMessage, outbox: Outbox): void;
  heartbeat(): Heartbeat;
  /** The control plane answered for the first time in this session. */
  onEstablished(): void;
  /** The stream took a message, `queuedMs` after it was queued. */
  onSent?(message: AgentMessage, queuedMs: number): void;
}

export type SessionOutcome =
  /** The agent is shutting down; the stream ending is the consequence. */
  | { kind: 'stopped' }
  /** The control plane closed the stream cleanly (it restarts, or moves us): reconnect at once. */
  | { kind: 'closed' }
  /** Anything else: report it and back off. */
  | { kind: 'failed'; error: unknown };

export interface SessionOptions {
  transport: Transport;
  heartbeatIntervalMs: number;
  /**
   * The stream fails when the control plane has sent no message this long
   * after it opened. HTTP/2 pings prove the connection, not the stream: a
   * peer that answers pings while the stream carries half a message (or
   * nothing) would otherwise hold the agent's only stream for ever. 0: never,
   * for a control plane that sends nothing until it has a command.
   */
  registerTimeoutMs: number;
  /** stream_stall_timeout: how long the outbox may take nothing before the stream is dropped; 0 or absent derives it (stalledOutboxLimitMs). */
  streamStallTimeoutMs?: number;
  nextMessageId: () => bigint;
  callbacks: SessionCallbacks;
  /** The agent's shutdown scope. Aborting it ends the stream and nothing else. */
  signal: AbortSignal;
  logger: Logger;
}

export interface SessionResult {
  outcome: SessionOutcome;
  /** Whether the control plane ever answered in this session. */
  established: boolean;
}

/**
 * One Connect stream to the control plane, from Register until it breaks.
 *
 * Shutdown is told apart from failure by the caller's signal, not by the
 * error: a client sees a server that died and its own abort as the same code
 * (Canceled), and reading every error after an abort as a clean stop is what
 * lets SIGTERM end the agent without a warning.
 */
export async function runSession(opts: SessionOptions): Promise<SessionResult> {
  const { callbacks, signal } = opts;
  const client = createClient(AgentService, opts.transport);
  const requests = createWritableIterable<AgentMessage>();
  // Every message passes here, so this is where sends are counted and timed.
  const sink = {
    write: async (message: AgentMessage) => {
      const queuedAt = performance.now();
      await requests.write(message);
      callbacks.onSent?.(message, performance.now() - queuedAt);
    },
  };
  const outbox = new Outbox(sink, opts.nextMessageId);
  const abort = new AbortController();
  const onShutdown = () => abort.abort();
  signal.addEventListener('abort', onShutdown, { once: true });
  let established = false;
  let heartbeats: NodeJS.Timeout | undefined;
  let unanswered: NodeJS.Timeout | undefined;
  // One line per failing message would let a control plane that finds a failing command fill the journal (finding 6).
  const failures = new RateLimitedLog(opts.logger);

  try {
    if (signal.aborted) return { outcome: { kind: 'stopped' }, established };
    const responses = client.connect(requests, { signal: abort.signal });
    const establish = () => {
      if (established || abort.signal.aborted) return;
      established = true;
      clearTimeout(unanswered);
      callbacks.onEstablished();
    };
    const registered = outbox.send({ case: 'register', value: callbacks.register() });
    // Failures of individual writes surface as the stream's own error below.
    registered.catch(() => {});
    callbacks.onOpen(outbox);
    const stalledLimitMs = stalledOutboxLimitMs(opts.heartbeatIntervalMs, opts.streamStallTimeoutMs);
    heartbeats = setInterval(() => {
      const stalledMs = outbox.stalledForMs();
      if (stalledMs > stalledLimitMs) {
        abort.abort(
          new Error(`the control plane stopped reading the stream: ${outbox.pending} messages waited ${formatDuration(stalledMs)} (${outbox.dropped} dropped)`),
        );
        return;
      }
      outbox.send({ case: 'heartbeat', value: callbacks.heartbeat() }).catch(() => {});
    }, opts.heartbeatIntervalMs);
    if (opts.registerTimeoutMs > 0) {
      unanswered = setTimeout(() => {
        abort.abort(
          new Error(`the control plane sent nothing within ${formatDuration(opts.registerTimeoutMs)} of the stream opening (register_timeout; 0s waits for ever)`),
        );
      }, opts.registerTimeoutMs);
    } else {
      // Nothing need come back to prove the stream: Register written is the most there is.
      registered.then(establish, () => {});
    }

    let sliceStartedMs = performance.now();
    for await (const message of responses) {
      establish();
      // Backpressure: answers the control plane is not reading stop its commands being read.
      while (outbox.pending > OUTBOX_HIGH_WATER && !abort.signal.aborted) await delay(50);
      if (performance.now() - sliceStartedMs > CONTROL_SLICE_MS) {
        // A macrotask, not a microtask: the loop then polls its sockets (a ping's answer) and runs its due timers.
        await new Promise<void>((resolve) => setImmediate(resolve));
        sliceStartedMs = performance.now();
      }
      try {
        callbacks.onControlMessage(message, outbox);
      } catch (err) {
        // A bad command must not take the whole node's stream down with it.
        failures.error({ err, messageId: String(message.messageId) }, 'handling a control message failed');
      }
    }
    return { outcome: signal.aborted ? { kind: 'stopped' } : { kind: 'closed' }, established };
  } catch (error) {
    if (signal.aborted) return { outcome: { kind: 'stopped' }, established };
    // Our own deadline, not the transport's Canceled, is the reason to report.
    if (abort.signal.aborted) return { outcome: { kind: 'failed', error: abort.signal.reason }, established };
    return { outcome: { kind: 'failed', error }, established };
  } finally {
    clearInterval(heartbeats);
    clearTimeout(unanswered);
    outbox.close();
    requests.close();
    abort.abort();
    signal.removeEventListener('abort', onShutdown);
  }
}
