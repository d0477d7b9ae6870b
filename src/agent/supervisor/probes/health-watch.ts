import { errorMessage } from '../../../lib/errors.js';
import { PROBE_TIMEOUT_MS, type ProbeResult, httpGet, probeHealth } from './http-probe.js';
import type { PortOwnerCheck } from './port-owner-check.js';
import { type EngineLoad, LoadMeter, UNKNOWN_LOAD } from './load-meter.js';
import { readCounter, readCounters } from './read-gauge.js';
import { readGauge, readGauges } from './read-gauge.js';
import { StallDetector, type StallVerdict } from './stall-detector.js';
import { TickConnection } from './tick-connection.js';
import { msToNextSlot } from './tick-grid.js';

/** Consecutive failed /health probes after READY that make a shard UNHEALTHY. One miss is noise; three is a hang. */
export const UNHEALTHY_AFTER_FAILURES = 3;
/**
 * Time between /health probes while a shard is UNHEALTHY for failed probes:
 * its recovery must reach the control plane in about 100 ms (issue 18), not
 * a full health interval later. Only then: a READY shard keeps the
 * configured interval, and a stalled one too (its /health answers all along;
 * only /metrics, far larger, would tell, and it is read at the interval).
 */
export const UNHEALTHY_PROBE_INTERVAL_MS = 50;

/** The one health judgement of a tick: what the shard should be, and why (ShardStatus.error when unhealthy). */
export interface HealthVerdict {
  healthy: boolean;
  /**
   * 'probes': /health failed UNHEALTHY_AFTER_FAILURES times in a row; 'stalled': requests running, no token;
   * 'asleep': the engine's sleep gauge says it sleeps, which the agent did not ask (security review 3, S6).
   */
  cause: 'probes' | 'stalled' | 'asleep' | undefined;
  why: string;
}

/** The series stall detection reads; both lists must name some, or only /health is judged. */
export interface StallWatch {
  runningGauges: readonly string[];
  /**
   * Any change of their sum is progress. The first is the engine's
   * generated-token counter, whose rate onLoad gives: vLLM's
   * generation_tokens_total, SGLang's realtime_tokens_total{mode="decode"}
   * (a series with label matchers, read-gauge.ts readCounter).
   */
  progressCounters: readonly string[];
  /** supervisor.stall_timeout; 0 turns stall detection off. */
  stallTimeoutMs: number;
  /** Gauges of requests running and waiting, read from the same answer for onLoad; none: in-flight unknown. */
  inFlightGauges?: readonly string[];
}

/** Limit of one health probe: the engine's own when it needs more (SGLang), else never longer than an interval, so one hung probe cannot hide the next ones. */
export function healthProbeTimeoutMs(intervalMs: number, engineMinimumMs = 0): number {
  return engineMinimumMs > 0 ? engineMinimumMs : Math.min(PROBE_TIMEOUT_MS, Math.max(500, intervalMs));
}

/**
 * Every `intervalMs` (UNHEALTHY_PROBE_INTERVAL_MS while failed probes keep
 * it unhealthy) until `signal` aborts: probes `baseUrl`/health, when its
 * port is the engine's (`portOwner`), and,
 * when `stall` names the engine's series and /health answered, reads
 * /metrics into one StallDetector; then calls `onVerdict` with the one
 * verdict of that tick. Probe failures come first: an engine that does not
 * answer /health cannot be judged by its metrics.
 *
 * A hung NCCL collective keeps the pid alive, so only a probe sees it; a
 * deadlocked scheduler keeps /health at 200 too (vLLM 52319, 39863, 11996),
 * so only the token counter sees that.
 *
 * A tick that learns nothing new (one or two probe misses, a /metrics read
 * that failed) repeats the last verdict rather than calling the engine
 * healthy: otherwise a stalled engine with one slow probe would flap to
 * READY and back, and the control plane would see it recover.
 */
export function watchHealth(opts: {
  baseUrl: string;
  intervalMs: number;
  signal: AbortSignal;
  /** The engine's health path; /health when not said. */
  healthPath?: string;
  /** The engine's least probe limit (EngineWatch.probeTimeoutMs); 0 or absent: derived from the interval. */
  probeTimeoutMs?: number;
  stall?: StallWatch;
  /** Who listens on the port: an answer from a socket not the engine's is a failed probe, and is never asked for. */
  portOwner?: PortOwnerCheck;
  onVerdict: (v: HealthVerdict) => void;
  /** While true, ticks ask nothing of the engine and the last verdict stands (a sleeping engine whose /health runs the model). */
  paused?: () => boolean;
  /**
   * Hears, every tick, what the tick's /metrics read said of the engine's
   * load (in flight, tokens per second from the first progress counter);
   * UNKNOWN_LOAD for a tick that read none, failed to, or runs without stall
   * detection, which alone reads /metrics.
   */
  onLoad?: (load: EngineLoad) => void;
  /**
   * A gauge that is 0 while the engine sleeps (vLLM's
   * `vllm:engine_sleep_state{sleep_state="awake"}`), read from /metrics every
   * tick: a READY engine that reads 0 was put to sleep by someone else (its
   * dev endpoints take no key) and answers nothing useful, so it is
   * UNHEALTHY, never READY. Only for engines started with sleep mode.
   */
  sleepGauge?: string;
  /**
   * Whether the agent itself has the engine asleep (the shard SLEEPING,
   * from before it asks the engine's /sleep to after its wake is proved).
   * A sleep-gauge read that began or ended while it did is no sign of
   * someone else's sleep: a tick whose /metrics answer, read across a wake,
   * arrived after the wake made the shard READY again once reported a
   * healthy shard UNHEALTHY, "something called its /sleep" (issue 51's 200
   * starts and wakes, at load 20).
   */
  sleeping?: () => boolean;
}): void {
  const { baseUrl, intervalMs, signal, stall, portOwner, healthPath } = opts;
  const timeoutMs = healthProbeTimeoutMs(intervalMs, opts.probeTimeoutMs);
  const detector =
    stall && stall.stallTimeoutMs > 0 && stall.runningGauges.length > 0 && stall.progressCounters.length > 0
      ? new StallDetector({ stallTimeoutMs: stall.stallTimeoutMs })
      : undefined;
  let failures = 0;
  let last: HealthVerdict = { healthy: true, cause: undefined, why: 'answers /health' };
  let timer: NodeJS.Timeout | undefined;
  const meter = new LoadMeter();
  /** What this tick's /metrics read said of the load; UNKNOWN_LOAD until one is made. */
  let load: EngineLoad = UNKNOWN_LOAD;

  /**
   * One connection a tick (tick-connection.ts): the port-owner check's,
   * then /health and /metrics on it. Never kept across ticks; engines close
   * idle connections after their keep-alive timeout anyway (vLLM's
   * VLLM_HTTP_TIMEOUT_KEEP_ALIVE, 5 s by default), which a 10 s interval
   * outlasts.
   */
  const connection = new TickConnection();
  /** Whether the last probe reached the engine's own socket: only then may its /metrics be read. */
  let reachedEngine = false;
  const probe = async (): Promise<ProbeResult> => {
    reachedEngine = false;
    const owner = await portOwner?.({ keepConnection: true });
    if (owner?.owner === 'engine' && owner.connection) connection.handOver(owner.connection);
    // Nothing listening is what a refused connection says, learnt without one.
    if (owner?.owner === 'nobody') return { ok: false, loading: false, reason: 'nothing listens on the port' };
    if (owner?.owner === 'other') return { ok: false, loading: false, reason: owner.reason };
    reachedEngine = true;
    return probeHealth(baseUrl, { timeoutMs, signal, healthPath, agent: connection });
  };

  /** This tick's /metrics text: read once, by the sleep check or the stall detector; null when the read failed. */
  let metricsText: string | null | undefined;
  const readMetrics = async (): Promise<string | undefined> => {
    if (metricsText === undefined) {
      try {
        const r = await httpGet(`${baseUrl}/metrics`, { timeoutMs, signal, agent: connection });
        metricsText = r.status === 200 ? r.body : null;
      } catch {
        metricsText = null;
      }
    }
    return metricsText ?? undefined;
  };

  /** The stall detector's verdict on the engine's /metrics now; undefined when there is none to read. */
  const readStall = async (): Promise<StallVerdict | undefined> => {
    if (!detector || !stall) return undefined;
    const text = await readMetrics();
    if (text === undefined) return undefined;
    const atMs = performance.now();
    const tokenCounter = stall.progressCounters[0];
    load = meter.observe({
      atMs,
      inFlight: stall.inFlightGauges?.length ? readGauges(text, stall.inFlightGauges) : undefined,
      tokens: tokenCounter === undefined ? undefined : readCounter(text, tokenCounter),
    });
    return detector.observe({
      atMs,
      requestsRunning: readGauges(text, stall.runningGauges),
      progress: readCounters(text, stall.progressCounters),
    });
  };

  /** Whether the engine says it sleeps (opts.sleepGauge at 0); false when it does not say. */
  const asleep = async (): Promise<boolean> => {
    if (!opts.sleepGauge || opts.sleeping?.()) return false;
    const text = await readMetrics();
    return text !== undefined && readGauge(text, opts.sleepGauge) === 0 && !opts.sleeping?.();
  };

  const judge = async (): Promise<HealthVerdict> => {
    const result = await probe().catch((err: unknown) => ({
      ok: false as const,
      loading: false,
      reason: errorMessage(err),
    }));
    if (!result.ok) {
      failures++;
      // A health check that is a generation (SGLang's /health_generate) hangs
      // with a stalled engine, whose /metrics still answers: that says why,
      // where "probes failed" would not.
      const v = reachedEngine ? await readStall() : undefined;
      if (v?.state === 'stalled') return { healthy: false, cause: 'stalled', why: v.reason };
      if (failures >= UNHEALTHY_AFTER_FAILURES) {
        return { healthy: false, cause: 'probes', why: `${failures} health probes failed in a row: ${result.reason}` };
      }
      return last;
    }
    const wasFailing = last.cause === 'probes';
    failures = 0;
    if (await asleep()) {
      return { healthy: false, cause: 'asleep', why: `the engine is asleep (${opts.sleepGauge} is 0), and the agent did not put it to sleep: something called its /sleep` };
    }
    if (last.cause === 'asleep') return { healthy: true, cause: undefined, why: `awake again (${opts.sleepGauge} is not 0)` };
    if (!detector || !stall) return { healthy: true, cause: undefined, why: wasFailing ? '/health answers again' : 'answers /health' };
    const v = await readStall();
    if (v === undefined) return wasFailing ? { healthy: true, cause: undefined, why: '/health answers again' } : last;
    if (v.state === 'stalled') return { healthy: false, cause: 'stalled', why: v.reason };
    const again = last.cause === 'stalled' ? `generating again (${v.reason})` : wasFailing ? '/health answers again' : v.reason;
    return { healthy: true, cause: undefined, why: again };
  };

  const tick = async () => {
    if (opts.paused?.()) {
      load = UNKNOWN_LOAD;
      opts.onLoad?.(load);
      timer = setTimeout(tick, msToNextSlot(intervalMs, performance.now()));
      timer.unref();
      return;
    }
    load = UNKNOWN_LOAD;
    metricsText = undefined;
    const v = await judge();
    // The tick's connection ends with it (see connection).
    connection.end();
    // Not held until the next tick: an engine's /metrics (hundreds of KiB
    // for vLLM) kept for a health interval outlives the young generation and
    // is copied into the old one, a major collection's work, every tick.
    metricsText = undefined;
    if (signal.aborted) return;
    last = v;
    opts.onLoad?.(load);
    opts.onVerdict(v);
    if (signal.aborted) return;
    // At the interval, on the slots every shard's ticks share (tick-grid.ts); an unhealthy shard's quick probes off the grid.
    timer = setTimeout(tick, v.cause === 'probes' ? Math.min(intervalMs, UNHEALTHY_PROBE_INTERVAL_MS) : msToNextSlot(intervalMs, performance.now()));
    timer.unref();
  };
  timer = setTimeout(tick, msToNextSlot(intervalMs, performance.now()));
  timer.unref();
  signal.addEventListener(
    'abort',
    () => {
      clearTimeout(timer);
      connection.end();
    },
    { once: true },
  );
}
