/** How `llmgw sim engine` behaves; every duration in milliseconds. */
export interface SimEngineOptions {
  host: string;
  port: number;
  /** The served model name: what /v1/models lists and requests must name. */
  model: string;
  /** The port stays closed this long, as vLLM's does while loading weights. */
  loadTimeMs: number;
  /**
   * Loading lasts until this file exists, then loadTimeMs more: a test that
   * needs the port closed while it does something ends the load when it is
   * done, instead of guessing a load time long enough at any load.
   */
  loadUntilFile?: string;
  /** Time per generated token, so tests can hold requests in flight. */
  tokenLatencyMs: number;
  /** Tokens generated when a request does not say. */
  maxTokens: number;
  /** Crash (exit with exitCode) this long after start. */
  failAfterMs?: number;
  exitCode: number;
  /** Never open the port: loading forever. */
  neverReady: boolean;
  /** Log SIGTERM and carry on, like an engine stuck in a collective. */
  ignoreSigterm: boolean;
  /** From this long after start, answer nothing (health included); the process stays. */
  hangAfterMs?: number;
  /** Lines per second written to stdout, to grow the log. */
  logRate?: number;
  /**
   * From this long after start, generate nothing: /health stays 200 and
   * requests are accepted and counted as running, but no token is produced and
   * vllm:generation_tokens_total stays flat. An engine stuck in a collective,
   * as vLLM issues 52319 and 39863 describe.
   */
  stallAfterMs?: number;
  /** Start a grandchild in the same process group that sleeps until killed. */
  spawnChild: boolean;
  /**
   * With spawnChild: the grandchild is a worker the engine cannot lose, as
   * vLLM's with TP > 1 are. It dies on SIGTERM (unless ignoreSigterm), and
   * its death makes the engine abort every in-flight request and exit 1:
   * vLLM's workers exit on SIGTERM (vllm/v1/executor/multiproc_executor.py:857-873)
   * and the executor then fails the engine (:298-324). A stop that SIGTERMs
   * the whole group aborts the requests; one that asks the engine alone
   * lets it drain.
   */
  fragileWorker?: boolean;
  /**
   * Start a grandchild that setsid()s out of the engine's session and process
   * group and keeps running, as a worker that daemonizes does: a stop that
   * signals the group cannot reach it, only a cgroup stop can.
   */
  spawnEscapingChild?: boolean;
  /** A non-zero rank: no HTTP, just stays alive and logs. */
  worker: boolean;
  /** host:port of a multi-node gang's rendezvous: rank 0 holds it, the others connect (sim-rendezvous.ts). */
  rendezvous?: string;
}

export const SIM_DEFAULTS = {
  host: '127.0.0.1',
  port: 8000,
  model: 'sim-model',
  loadTimeMs: 0,
  tokenLatencyMs: 5,
  maxTokens: 16,
  exitCode: 1,
} as const;
