import type { Logger } from '../../lib/logger.js';
import type { LoadedTls } from './control-plane-transport.js';

/**
 * Where the agent stands with the control plane. Changed only through
 * ConnectionState.transition, which checks the change against
 * CONNECTION_TRANSITIONS and logs it.
 *
 * - starting: discovering hardware and recovering engines, not yet dialling
 * - connecting: a session is being opened
 * - connected: the control plane has answered in this session
 * - retrying: waiting out the backoff before the next attempt
 * - stopping / stopped: shutdown; engines keep running
 */
export type ConnectionPhase = 'starting' | 'connecting' | 'connected' | 'retrying' | 'stopping' | 'stopped';

export interface ConnectionStatus {
  phase: ConnectionPhase;
  server: string;
  protocol: string;
  /** When the current session was established (ms since epoch), 0 when not connected. */
  connectedSinceMs: number;
  /** Failed attempts since the last established session. */
  attempt: number;
  /** When the next attempt is due (ms since epoch), 0 when none is scheduled. */
  nextAttemptAtMs: number;
  lastError: string;
  /** The TLS files as the last (re)connection loaded them; absent over h2c or before the first. */
  tls?: LoadedTls;
}

/**
 * A change of phase, with the facts that phase carries. Each field of
 * ConnectionStatus is set by exactly one kind of change, so no caller can
 * leave, say, an attempt count from one session in the next.
 */
export type ConnectionChange =
  /** A new session is dialled. `cleanClose`: the last one was closed on purpose, which is no failed attempt. */
  | { phase: 'connecting'; cleanClose?: boolean }
  | { phase: 'connected'; atMs: number }
  | { phase: 'retrying'; attempt: number; error: string; nextAttemptAtMs: number }
  | { phase: 'stopping' }
  | { phase: 'stopped' };

/**
 * The phases each phase may go to. connecting → connecting is a stream closed
 * cleanly before the control plane answered, dialled again at once; stopped
 * is final.
 */
export const CONNECTION_TRANSITIONS: Readonly<Record<ConnectionPhase, readonly ConnectionPhase[]>> = {
  starting: ['connecting', 'stopping'],
  connecting: ['connecting', 'connected', 'retrying', 'stopping'],
  connected: ['connecting', 'retrying', 'stopping'],
  retrying: ['connecting', 'stopping'],
  stopping: ['stopped'],
  stopped: [],
};

/**
 * The status after `change`. Throws for a change the table does not allow:
 * that is a bug in the session loop, and a status that says "connected"
 * while the agent is stopping is what operators would be left to debug.
 */
export function nextConnectionStatus(s: ConnectionStatus, change: ConnectionChange): ConnectionStatus {
  if (!CONNECTION_TRANSITIONS[s.phase].includes(change.phase)) {
    throw new Error(`control-plane connection cannot go from ${s.phase} to ${change.phase}`);
  }
  const next: ConnectionStatus = { ...s, phase: change.phase, nextAttemptAtMs: 0 };
  switch (change.phase) {
    case 'connecting':
      next.connectedSinceMs = 0;
      if (change.cleanClose) next.attempt = 0;
      break;
    case 'connected':
      next.connectedSinceMs = change.atMs;
      next.attempt = 0;
      next.lastError = '';
      break;
    case 'retrying':
      next.connectedSinceMs = 0;
      next.attempt = change.attempt;
      next.lastError = change.error;
      next.nextAttemptAtMs = change.nextAttemptAtMs;
      break;
    // stopping, stopped: the last session's facts stay readable until the process ends.
  }
  return next;
}

/** Told of a change of phase: where it came from, and the status it left. */
export type PhaseListener = (from: ConnectionPhase, status: ConnectionStatus) => void;

/** The connection status of one agent, and the one place it changes. */
export class ConnectionState {
  private current: ConnectionStatus;

  constructor(
    target: { server: string; protocol: string },
    private readonly log: Logger,
    private readonly onPhase?: PhaseListener,
  ) {
    this.current = { phase: 'starting', server: target.server, protocol: target.protocol, connectedSinceMs: 0, attempt: 0, nextAttemptAtMs: 0, lastError: '' };
  }

  /** A copy: callers (ctl status) must not be able to change it. */
  status(): ConnectionStatus {
    return { ...this.current };
  }

  transition(change: ConnectionChange): void {
    const from = this.current.phase;
    this.current = nextConnectionStatus(this.current, change);
    this.log.info({ from, to: change.phase, server: this.current.server, attempt: this.current.attempt }, 'control-plane connection');
    this.onPhase?.(from, this.status());
  }
}
