/**
 * Where the agent stands with the control plane. Changed only through
 * Agent.setConnection, which logs every change.
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
}
