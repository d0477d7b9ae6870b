import { ConnectError } from '@connectrpc/connect';
import { abortableSleep } from '../../lib/abortable-sleep.js';
import { errnoCode } from '../../lib/errno.js';
import { errorMessage } from '../../lib/errors.js';
import type { Logger } from '../../lib/logger.js';
import { findTlsFileNotWritten } from '../../lib/read-pem-file.js';
import type { ConnectionMetrics } from './connection-metrics.js';
import type { AgentConfig } from '../config/agent-config.js';
import { type ConnectionChange, ConnectionState, type ConnectionStatus, type PhaseListener } from './connection-state.js';
import { runSession, type SessionCallbacks } from './control-plane-session.js';
import { certificateDateProblem, createControlPlaneTransport, type LoadedTls } from './control-plane-transport.js';
import { explainConnectFailure } from './explain-connect-failure.js';
import { cleanCloseDelayMs, jitterSource, reconnectDelayMs } from './reconnect-delay.js';

/** The shortest HTTP/2 ping period, whatever the heartbeat. */
export const PING_INTERVAL_FLOOR_MS = 1000;
/**
 * The shortest wait for a ping's answer, whatever the heartbeat. A busy
 * event loop is the innocent look-alike of a dead peer: the answer waits in
 * the socket while the loop is held, and the ping's timer runs before the
 * poll phase reads it. Loop stalls of 2.6-3.4 s were measured on a loaded
 * 2-core machine (test/security/hostile-control-plane.ts); a node also
 * stalls on GC or a big message to decode. At 1 s (the floor it shared with
 * the interval) a short heartbeat made such a stall drop a healthy stream,
 * and what the control plane had just sent on it with it. 5 s is above
 * those stalls and still finds a dead peer within 6 s (interval + timeout)
 * at the shortest heartbeat; the default heartbeat (5 s) gives 10 s anyway.
 */
export const PING_TIMEOUT_FLOOR_MS = 5000;

/** The HTTP/2 ping's period and timeout for a heartbeat: twice the heartbeat, each at least its floor. */
export function pingTimingMs(heartbeatIntervalMs: number): { pingIntervalMs: number; pingTimeoutMs: number } {
  return {
    pingIntervalMs: Math.max(PING_INTERVAL_FLOOR_MS, 2 * heartbeatIntervalMs),
    pingTimeoutMs: Math.max(PING_TIMEOUT_FLOOR_MS, 2 * heartbeatIntervalMs),
  };
}
/** A session answered and open this long was a working one: its end starts the backoff afresh. */
export const STABLE_SESSION_MS = 5000;
/** While a TLS file is not written yet, the wait is logged once, then again at most this often (the retries are silent in between). */
export const TLS_WAIT_LOG_REPEAT_MS = 60_000;

/** What each session asks of the agent; the connection owns the rest (numbering, metrics, phases). */
export interface SessionHandlers extends Pick<SessionCallbacks, 'register' | 'heartbeat' | 'onOpen' | 'onControlMessage'> {
  /** The control plane answered (or, with register_timeout 0s, took Register): what was sent on the outbox reached a stream. */
  onEstablished?(): void;
  /** The session's stream is gone; nothing may be sent on its outbox any more. */
  onClosed(): void;
}

export interface ControlPlaneConnectionOptions {
  config: Pick<AgentConfig, 'server' | 'protocol' | 'tls' | 'heartbeatIntervalMs' | 'registerTimeoutMs' | 'streamStallTimeoutMs' | 'reconnectBaseMs' | 'reconnectMaxMs'>;
  logger: Logger;
  metrics?: ConnectionMetrics;
  session: SessionHandlers;
  /**
   * Where the reconnect delays draw their jitter (each returns [0, 1)).
   * Default: Math.random, or none with LLMGW_INTERNAL_RECONNECT_JITTER=off.
   */
  random?: { backoff: () => number; cleanClose: () => number };
  /** Told of every change of phase, after it is logged (`ctl events`). */
  onPhase?: PhaseListener;
}

export interface ConnectionHooks {
  /** Called once, as the first session is dialled (systemd READY=1 then means "ctl works"). */
  onFirstAttempt?: () => void;
  /** Called between stopping and stopped, to release what lives as long as the connection. */
  onStopping?: () => void;
}

/**
 * The agent's link to the control plane: one session at a time, for as long
 * as the agent runs, reconnecting with backoff and jitter. Reconnecting for
 * ever is right for a node agent: a control-plane restart or a partition
 * must not need anyone to touch every GPU node.
 */
export class ControlPlaneConnection {
  private readonly state: ConnectionState;
  private readonly log: Logger;
  /** One sequence for the agent process, across sessions: the control plane acks by these ids. */
  private messageId = 0n;
  /** The TLS files as the last (re)connection loaded them. */
  private tls: LoadedTls | undefined;
  /** What the last attempt waited for (a TLS file not written yet), until the files load. */
  private waitingFor = '';

  constructor(private readonly opts: ControlPlaneConnectionOptions) {
    this.log = opts.logger;
    this.state = new ConnectionState(opts.config, opts.logger, opts.onPhase);
  }

  status(): ConnectionStatus {
    return { ...this.state.status(), tls: this.tls };
  }

  /**
   * Holds sessions until `signal` aborts, then resolves in phase stopped.
   * Aborting ends the stream and nothing else.
   */
  async run(signal: AbortSignal, hooks: ConnectionHooks = {}): Promise<void> {
    const c = this.opts.config;
    const metrics = this.opts.metrics;
    const transport = createControlPlaneTransport({
      server: c.server,
      protocol: c.protocol,
      tls: c.tls,
      ...pingTimingMs(c.heartbeatIntervalMs),
      logger: this.log,
      onTlsLoaded: (loaded) => {
        this.tls = loaded;
        if (this.waitingFor !== '') {
          this.log.info({ waitedFor: this.waitingFor }, 'the TLS files are written; connecting with them');
          this.waitingFor = '';
        }
      },
    });
    const session = this.opts.session;
    const random = this.opts.random ?? jitterSource();

    let first = true;
    let next: ConnectionChange = { phase: 'connecting' };
    /** Failed attempts since the last stable session: what the backoff grows with. */
    let backoffAttempt = 0;
    /** Clean closes in a row of sessions that did not get stable. */
    let quickCloses = 0;
    /** When the wait for a TLS file was last logged. */
    let waitLoggedAtMs = Number.NEGATIVE_INFINITY;
    while (!signal.aborted) {
      this.state.transition(next);
      if (first) {
        first = false;
        hooks.onFirstAttempt?.();
      }
      const startedMs = Date.now();
      const result = await runSession({
        transport,
        heartbeatIntervalMs: c.heartbeatIntervalMs,
        registerTimeoutMs: c.registerTimeoutMs,
        streamStallTimeoutMs: c.streamStallTimeoutMs,
        nextMessageId: () => ++this.messageId,
        signal,
        logger: this.log,
        callbacks: {
          register: () => session.register(),
          onOpen: (outbox) => {
            metrics?.followOutbox(outbox);
            session.onOpen(outbox);
          },
          // The agent's own handler, not a lambda that forwards to it: one hop less on every command's way in.
          onControlMessage: session.onControlMessage,
          heartbeat: () => session.heartbeat(),
          onSent: (message, queuedMs) => {
            metrics?.messagesSent.inc({ type: message.msg.case ?? 'unknown' });
            if (message.msg.case === 'heartbeat') metrics?.heartbeatSendSeconds.observe(queuedMs / 1000);
          },
          onEstablished: () => {
            this.state.transition({ phase: 'connected', atMs: Date.now() });
            session.onEstablished?.();
            metrics?.connected.set(1);
          },
        },
      });
      session.onClosed();
      metrics?.connected.set(0);
      metrics?.followOutbox(undefined);
      const outcome = result.outcome;
      const waiting = outcome.kind === 'failed' ? findTlsFileNotWritten(outcome.error) : undefined;
      if (outcome.kind === 'stopped' || signal.aborted) break;
      metrics?.reconnects.inc();

      // Stable: answered and lived a while, or outlived the longest backoff.
      // Only that resets the backoff; an answer alone does not, or a control
      // plane that acks every Register and then drops the stream would be
      // retried at the base rate for ever.
      const livedMs = Date.now() - startedMs;
      const stable = (result.established && livedMs >= STABLE_SESSION_MS) || livedMs > c.reconnectMaxMs;
      let error: unknown;
      if (outcome.kind === 'closed') {
        quickCloses = stable ? 1 : quickCloses + 1;
        if (quickCloses === 1) {
          // The control plane closed the stream on purpose, as a restart
          // does: come back without a backoff, but not all at once. A restart
          // closes every agent's stream in the same instant, and a fleet that
          // answers in the same instant is a thundering herd of handshakes
          // against a process that has just started (cleanCloseDelayMs).
          backoffAttempt = 0;
          const delayMs = cleanCloseDelayMs(c.reconnectBaseMs, random.cleanClose);
          this.log.info({ retryInMs: delayMs }, 'control plane closed the stream; reconnecting');
          if (delayMs > 0) {
            this.state.transition({ phase: 'retrying', attempt: 0, error: 'the control plane closed the stream', nextAttemptAtMs: Date.now() + delayMs });
            await abortableSleep(delayMs, signal);
          }
          next = { phase: 'connecting', cleanClose: true };
          continue;
        }
        // Closed again before the session got stable: a control plane that
        // ends every stream at once. Coming straight back each time was a
        // hot loop (about 240 streams a second, found by the fault campaign).
        error = new Error(`the control plane ended ${quickCloses} streams in a row soon after they opened`);
      } else {
        quickCloses = 0;
        error = outcome.error;
      }
      backoffAttempt = stable ? 1 : backoffAttempt + 1;
      const delayMs = reconnectDelayMs(backoffAttempt, c.reconnectBaseMs, c.reconnectMaxMs, random.backoff);
      const why = waiting ? waiting.message : await explainConnectFailure(c.server, withCertificateHint(describeStreamError(error), this.tls), this.tls);
      this.state.transition({ phase: 'retrying', attempt: backoffAttempt, error: why, nextAttemptAtMs: Date.now() + delayMs });
      if (waiting) {
        // Once per file, then at a bounded interval: a boot-time race, not a failure worth a line per retry.
        const fresh = waiting.message !== this.waitingFor;
        if (fresh || Date.now() - waitLoggedAtMs >= TLS_WAIT_LOG_REPEAT_MS) {
          waitLoggedAtMs = Date.now();
          this.log.warn({ file: waiting.path, key: waiting.key, attempt: backoffAttempt, retryInMs: delayMs }, `${why}; the agent connects once it is there`);
        }
        this.waitingFor = waiting.message;
      } else {
        this.log.warn({ err: why, attempt: backoffAttempt, retryInMs: delayMs }, 'cannot reach the control plane; retrying');
      }
      await abortableSleep(delayMs, signal);
      next = { phase: 'connecting' };
    }
    this.state.transition({ phase: 'stopping' });
    hooks.onStopping?.();
    this.state.transition({ phase: 'stopped' });
  }
}

/**
 * `why`, led by what the client certificate's dates say when they explain a
 * refused TLS handshake: the control plane's alert alone names no file, and
 * an operator reading "socket hang up" would look at the network.
 */
export function withCertificateHint(why: string, loaded: LoadedTls | undefined, nowMs = Date.now()): string {
  if (!TLS_REFUSAL.test(why)) return why;
  const problem = certificateDateProblem(loaded, nowMs);
  return problem ? `${problem} (${why})` : why;
}

/**
 * What a refused client certificate looks like from the client: an alert
 * during the handshake (TLS 1.2), or, with TLS 1.3, where the server checks
 * the certificate after the client thinks the handshake is done, a reset or
 * hang-up; a control plane that checks it itself names it. A refused or
 * unreachable port never saw the certificate, so it gets no hint.
 */
const TLS_REFUSAL = /certificate|ssl|tls|alert|handshake|ECONNRESET|socket hang up/i;

/**
 * One line for why a session failed, with the underlying cause: a refused
 * certificate arrives here, and an agent that cannot say why it is not
 * registering is one an operator cannot fix.
 */
export function describeStreamError(err: unknown): string {
  const base = err instanceof ConnectError ? err.rawMessage : errorMessage(err);
  const parts = [base];
  let cause: unknown = err instanceof Error ? err.cause : undefined;
  for (let depth = 0; cause && depth < 4; depth++) {
    const msg = errorMessage(cause);
    // TLS and socket failures name themselves by code (ECONNREFUSED, ERR_SSL_…) more than by message.
    const code = errnoCode(cause);
    const text = code && !msg.includes(code) ? `${msg} (${code})` : msg;
    if (!parts.some((p) => p.includes(text))) parts.push(text);
    cause = cause instanceof Error ? cause.cause : undefined;
  }
  return parts.join(': ');
}
