import type { Outbox } from './outbox.js';

/**
 * What the connection counts into the agent's metrics, declared here so
 * that the connection reads no room above it: AgentMetrics (metrics/)
 * implements it, and the composition root hands it over.
 */
export interface ConnectionMetrics {
  /** 1 while a session is established. */
  connected: { set(value: number): void };
  reconnects: { inc(): void };
  messagesSent: { inc(labels: { type: string }): void };
  heartbeatSendSeconds: { observe(seconds: number): void };
  /** The outbox whose depth is reported; undefined between sessions. */
  followOutbox(outbox: Outbox | undefined): void;
}

/** What the status reporter counts: engines that ended, by the state they ended in. */
export interface ReporterMetrics {
  engineExits: { inc(labels: { state: string }): void };
}
