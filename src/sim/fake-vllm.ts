/**
 * A test double of `vllm serve` (bin/fake-vllm): it takes vLLM's own command
 * line and behaves as vLLM's source says it does (the citations are to
 * vLLM 2f41c894, V:path:line, as read in shared/reviews/engine-fidelity.md
 * and shared/fixtures/engines/ENGINES.md). Knobs vLLM does not have start
 * with --sim- (sim-knobs.ts).
 */
import { existsSync } from 'node:fs';
import { type IncomingMessage, type Server, type ServerResponse, createServer } from 'node:http';
import { networkInterfaces } from 'node:os';
import { resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { EngineChildren } from './engine-children.js';
import { ARGPARSE_EXIT, type ArgSpec, ArgparseError, parseArgv, printArgparseError } from './engine-argv.js';
import { vllmLog } from './engine-log.js';
import { FakeBatchScheduler, type FinishReason } from './fake-batch-scheduler.js';
import { type RouteContext, bearerOk, serveEmbedding, serveGeneration } from './fake-openai-routes.js';
import { FakeVllmSleep } from './fake-vllm-sleep.js';
import { type CompileKey, MissingWeightsError, compileMarkerPath, findSnapshot, hasCompileMarker, hubOffline, readWeights, writeCompileMarker } from './fake-weights.js';
import { sendJson } from './sim-http.js';
import { errorBody, modelList } from './openai-responses.js';
import { SIM_KNOB_SPECS, type SimKnobs, simKnobs, versionBefore } from './sim-knobs.js';

/** V:vllm/entrypoints/cli/serve.py:163. */
const USAGE = 'vllm serve [model_tag] [options]';
const PROG = 'vllm serve';

/** The commit the citations are at lies between v0.27.1 and v0.28.0. */
export const DEFAULT_VLLM_VERSION = '0.27.1';

/** --shutdown-timeout was added by vLLM PR #36666, first released in v0.18.0 (review §0 #11). */
const SHUTDOWN_TIMEOUT_SINCE = '0.18';

/** V:vllm/entrypoints/openai/cli_args.py:246-248. */
const DEFAULT_PORT = 8000;

/** The API server's engine watchdog looks every 5 s (V:vllm/entrypoints/launchers/launcher.py:180-202). */
const ENGINE_WATCHDOG_MS = 5000;

/** How long an exit waits for finished answers to leave before closing the sockets. */
const FLUSH_MS = 500;

export interface FakeVllmOptions {
  model: string;
  /** --revision: the branch, tag or commit of the model's weights; main when not given. */
  revision: string;
  /** --served-model-name; the first is reported and labels the metrics (V:vllm/engine/arg_utils.py:903-905). */
  servedNames: string[];
  /** undefined: every interface (V:vllm/entrypoints/launchers/launcher.py:268). */
  host?: string;
  port: number;
  tp: number;
  pp: number;
  shutdownTimeoutS: number;
  apiKeys: string[];
  nnodes: number;
  nodeRank: number;
  headless: boolean;
  dp: number;
  dpLocal?: number;
  dpStartRank?: number;
  /**
   * API server processes: --api-server-count, else the default of the DP
   * load-balancing mode (V:vllm/entrypoints/cli/serve.py:101-124); 0 headless.
   */
  apiServers: number;
  /** A ValueError `vllm serve` raises before starting anything (serve.py:63-100); it exits 1. */
  startError?: string;
  runner: 'generate' | 'pooling';
  loadTracking: boolean;
  logStats: boolean;
  version: string;
  knobs: SimKnobs;
  /** --enable-sleep-mode. */
  sleepMode: boolean;
}

function specs(version: string): ArgSpec[] {
  const s: ArgSpec[] = [
    // V:vllm/utils/argparse_utils.py:253-285: --model is still accepted.
    { names: ['--model'], kind: 'string' },
    // EngineArgs.revision (V:vllm/engine/arg_utils.py): which snapshot --sim-read-weights reads.
    { names: ['--revision'], kind: 'string' },
    { names: ['--host'], kind: 'string' },
    { names: ['--port'], kind: 'int' },
    { names: ['--served-model-name'], kind: 'strings' },
    // V:vllm/engine/arg_utils.py:1020-1024, 1058-1060.
    { names: ['--tensor-parallel-size', '-tp'], kind: 'int' },
    { names: ['--pipeline-parallel-size', '-pp'], kind: 'int' },
    { names: ['--api-key'], kind: 'strings' },
    // V:vllm/engine/arg_utils.py:1025-1028.
    { names: ['--nnodes', '-n'], kind: 'int' },
    { names: ['--node-rank', '-r'], kind: 'int' },
    { names: ['--master-addr'], kind: 'string' },
    { names: ['--master-port'], kind: 'int' },
    // V:vllm/entrypoints/openai/cli_args.py:379-385.
    { names: ['--headless'], kind: 'flag' },
    // V:vllm/engine/arg_utils.py:1083-1114.
    { names: ['--data-parallel-size', '-dp'], kind: 'int' },
    { names: ['--data-parallel-size-local', '-dpl'], kind: 'int' },
    { names: ['--data-parallel-start-rank', '-dpr'], kind: 'int' },
    { names: ['--data-parallel-address', '-dpa'], kind: 'string' },
    { names: ['--data-parallel-rpc-port', '-dpp'], kind: 'int' },
    { names: ['--data-parallel-rank', '-dpn'], kind: 'int' },
    { names: ['--data-parallel-hybrid-lb', '-dph'], kind: 'flag' },
    { names: ['--data-parallel-external-lb', '-dpe'], kind: 'flag' },
    // V:vllm/entrypoints/openai/cli_args.py:386-393: default None, decided in serve.py:107-124.
    { names: ['--api-server-count', '-asc'], kind: 'int' },
    { names: ['--runner'], kind: 'string', choices: ['auto', 'generate', 'pooling', 'draft'] },
    // V:vllm/entrypoints/openai/cli_args.py:136.
    { names: ['--enable-server-load-tracking'], kind: 'flag' },
    // V:vllm/engine/arg_utils.py:1673-1677.
    { names: ['--disable-log-stats'], kind: 'flag' },
    // V:vllm/engine/arg_utils.py:919-921.
    { names: ['--enable-sleep-mode'], kind: 'flag' },
    ...SIM_KNOB_SPECS,
  ];
  // V:vllm/engine/arg_utils.py:1694-1699 (type=int, default 0); absent before
  // PR #36666, so an older vLLM calls it unrecognized and exits 2.
  if (!versionBefore(version, SHUTDOWN_TIMEOUT_SINCE)) s.push({ names: ['--shutdown-timeout'], kind: 'int' });
  return s;
}

/** vLLM's options from `serve …` argv (without the `serve`); throws ArgparseError as vLLM's parser would refuse it. */
export function parseFakeVllmArgv(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): FakeVllmOptions {
  // The version decides which flags exist, so it is read before the rest.
  const versionAt = argv.findIndex((a) => a === '--sim-version' || a.startsWith('--sim-version='));
  const versionArg = versionAt === -1 ? undefined : argv[versionAt]?.includes('=') ? argv[versionAt]?.split('=')[1] : argv[versionAt + 1];
  const version = versionArg ?? DEFAULT_VLLM_VERSION;
  // V:vllm/entrypoints/openai/cli_args.py:373-378: one positional, model_tag.
  const p = parseArgv(argv, specs(version), { maxPositionals: 1, underscoresAsDashes: true });
  const knobs = simKnobs(p);
  const model = p.positionals[0] ?? (p.values.get('--model') as string | undefined);
  if (!model) throw new ArgparseError('the double needs a model: give it as `vllm serve <model>`');
  const int = (name: string, dflt: number) => (p.values.get(name) as number | undefined) ?? dflt;
  const names = p.values.get('--served-model-name') as string[] | undefined;
  // V:vllm/entrypoints/serve/middleware/register.py:33: --api-key, else VLLM_API_KEY.
  const keys = (p.values.get('--api-key') as string[] | undefined) ?? (env.VLLM_API_KEY ? [env.VLLM_API_KEY] : []);
  const runner = p.values.get('--runner');
  const api = apiServers({
    headless: p.values.get('--headless') === true,
    given: p.values.get('--api-server-count') as number | undefined,
    dp: int('--data-parallel-size', 1),
    dpLocal: p.values.get('--data-parallel-size-local') as number | undefined,
    externalLb: p.values.get('--data-parallel-external-lb') === true || p.values.get('--data-parallel-rank') !== undefined,
    hybridLb: p.values.get('--data-parallel-hybrid-lb') === true || p.values.get('--data-parallel-start-rank') !== undefined,
  });
  return {
    model,
    revision: (p.values.get('--revision') as string | undefined) ?? 'main',
    servedNames: names ?? [model],
    host: p.values.get('--host') as string | undefined,
    port: int('--port', DEFAULT_PORT),
    tp: int('--tensor-parallel-size', 1),
    pp: int('--pipeline-parallel-size', 1),
    shutdownTimeoutS: int('--shutdown-timeout', 0),
    apiKeys: keys.filter(Boolean),
    nnodes: int('--nnodes', 1),
    nodeRank: int('--node-rank', 0),
    headless: p.values.get('--headless') === true,
    dp: int('--data-parallel-size', 1),
    dpLocal: p.values.get('--data-parallel-size-local') as number | undefined,
    dpStartRank: p.values.get('--data-parallel-start-rank') as number | undefined,
    ...api,
    runner: runner === 'pooling' ? 'pooling' : 'generate',
    loadTracking: p.values.get('--enable-server-load-tracking') === true,
    logStats: p.values.get('--disable-log-stats') !== true,
    version,
    knobs,
    sleepMode: p.values.get('--enable-sleep-mode') === true,
  };
}

/**
 * How many API server processes `vllm serve` runs (V:vllm/entrypoints/cli/serve.py:63-124):
 * none headless (a count given there is a ValueError); else the one given;
 * else 1 for an external load balancer, the local DP size for the hybrid
 * one, and the whole DP size for vLLM's own (internal) balancing, which is
 * what a plain `--data-parallel-size N` gets.
 */
export function apiServers(a: { headless: boolean; given?: number; dp: number; dpLocal?: number; externalLb: boolean; hybridLb: boolean }): { apiServers: number; startError?: string } {
  if (a.headless) {
    if (a.given !== undefined && a.given > 0) {
      return { apiServers: 0, startError: `ValueError: --api-server-count=${a.given} cannot be used with --headless (no API servers are started in headless mode).` };
    }
    return { apiServers: 0 };
  }
  if (a.externalLb && a.hybridLb) {
    return { apiServers: 1, startError: 'ValueError: Cannot use more than one data parallel load balancing mode.' };
  }
  if (a.given !== undefined) return { apiServers: a.given };
  if (a.externalLb) return { apiServers: 1 };
  if (a.hybridLb) return { apiServers: a.dpLocal ?? 1 };
  return { apiServers: a.dp };
}

/**
 * Worker processes on this node. Workers are separate processes whenever
 * the world size across DP is above 1 (V:vllm/config/parallel.py:912-957);
 * TP/PP across nodes splits tp × pp over them, DP puts tp × pp × local DP
 * ranks on each.
 */
export function localWorkers(o: Pick<FakeVllmOptions, 'tp' | 'pp' | 'dp' | 'dpLocal' | 'nnodes'>): number {
  if (o.tp * o.pp * o.dp <= 1) return 0;
  if (o.dp > 1) return o.tp * o.pp * (o.dpLocal ?? o.dp);
  return Math.max(1, Math.ceil((o.tp * o.pp) / o.nnodes));
}

/**
 * The address the multi-node leader binds its broadcast queue on:
 * VLLM_HOST_IP, else the default-route source address
 * (V:vllm/utils/network_utils.py:34-73). The double takes the first
 * non-internal IPv4 address as its stand-in for the default route.
 */
export function hostIp(env: NodeJS.ProcessEnv): string {
  if (env.VLLM_HOST_IP) return env.VLLM_HOST_IP;
  for (const addrs of Object.values(networkInterfaces())) {
    for (const a of addrs ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  }
  return '127.0.0.1';
}

/**
 * loading: port closed; serving; draining: SIGTERM with --shutdown-timeout
 * > 0; failed: the engine is dead, /health 503 until the watchdog exits;
 * exiting: the answer is decided.
 */
type Phase = 'loading' | 'serving' | 'draining' | 'failed' | 'exiting';

const NEXT: Record<Phase, readonly Phase[]> = {
  loading: ['serving', 'failed', 'exiting'],
  serving: ['draining', 'failed', 'exiting'],
  draining: ['failed', 'exiting'],
  failed: ['exiting'],
  exiting: [],
};

interface Counters {
  promptTokens: number;
  generationTokens: number;
  success: Record<FinishReason, number>;
}

/** Runs the double until it exits; resolves with its exit status. */
export function runFakeVllm(o: FakeVllmOptions, env: NodeJS.ProcessEnv = process.env): Promise<number> {
  return new Promise<number>((resolveExit) => {
    const k = o.knobs;
    const startedS = Math.floor(Date.now() / 1000);
    const servedName = o.servedNames[0] as string;
    const timers: NodeJS.Timeout[] = [];
    const counters: Counters = { promptTokens: 0, generationTokens: 0, success: { length: 0, stop: 0 } };
    let phase: Phase = 'loading';
    let hung = false;
    let httpInFlight = 0;
    let server: Server | undefined;
    let servingSinceMs = 0;
    /** Sleep mode's routes and memory; none on a headless rank. */
    let sleepMode: FakeVllmSleep | undefined;

    const later = (ms: number, fn: () => void) => timers.push(setTimeout(fn, ms));
    // Nothing else may hold the loop while loading or headless.
    timers.push(setInterval(() => {}, 1 << 30));

    const setPhase = (next: Phase, why: string) => {
      if (!NEXT[phase].includes(next)) throw new Error(`fake-vllm: no transition ${phase} -> ${next}`);
      vllmLog('INFO', 'fake-vllm', `phase ${phase} -> ${next}: ${why}`);
      phase = next;
    };

    const scheduler = new FakeBatchScheduler(
      { maxRunning: k.maxRunning, tokenLatencyMs: k.tokenLatencyMs, embedLatencyMs: k.embedLatencyMs },
      {
        // Prompt tokens count when a request's prefill completes (V:vllm/v1/metrics/stats.py:386-391);
        // for a pooling request that is when it finishes.
        prefill: (r) => {
          counters.promptTokens += r.promptTokens;
        },
        // Generation tokens per engine step (V:vllm/v1/metrics/loggers.py:1194, 1202-1204).
        token: () => {
          counters.generationTokens++;
        },
        finish: (r) => {
          counters.success[r.finishReason]++;
        },
      },
    );

    const exit = async (code: number, why: string) => {
      if (phase === 'exiting') return;
      sleepMode?.gone();
      setPhase('exiting', why);
      for (const t of timers) clearTimeout(t);
      process.off('SIGTERM', onTerm);
      process.off('SIGINT', onTerm);
      if (server) {
        const closed = new Promise((r) => server?.close(r));
        server.closeIdleConnections();
        await Promise.race([closed, sleep(FLUSH_MS)]);
        server.closeAllConnections();
      }
      resolveExit(code);
    };

    /**
     * The engine is dead: every in-flight request is aborted, the executor
     * shuts its workers down, /health answers 503, and the API server's
     * watchdog makes it exit at its next look (ENGINES.md (a) "Engine dead",
     * V:vllm/v1/engine/async_llm.py:940-943; launcher.py:180-202).
     */
    const failEngine = (why: string) => {
      if (phase === 'failed' || phase === 'exiting') return;
      const wasServing = server !== undefined;
      setPhase('failed', why);
      vllmLog('ERROR', 'core.py:1548', 'EngineCore encountered a fatal error: Executor failed.');
      scheduler.abortAll('EngineCore encountered an issue. See stack trace (above) for the root cause.');
      void workers?.terminate();
      if (!wasServing) {
        void exit(1, 'the engine failed while loading');
        return;
      }
      const sinceTick = (Date.now() - servingSinceMs) % ENGINE_WATCHDOG_MS;
      later(ENGINE_WATCHDOG_MS - sinceTick, () => {
        vllmLog('ERROR', 'launcher.py:195', 'AsyncLLM output_handler failed; engine is dead. Shutting down.');
        void exit(1, 'the engine is dead');
      });
    };

    const workerCount = localWorkers(o);
    // A worker dying that the engine did not end fails the engine
    // (V:vllm/v1/executor/multiproc_executor.py:298-324).
    const workers =
      workerCount > 0
        ? new EngineChildren(
            Array.from({ length: workerCount }, () => ({
              readyLine: 'INFO [multiproc_executor.py:700] Worker proc {pid} ready',
              // V:vllm/v1/executor/multiproc_executor.py:857-873: a worker turns SIGTERM into SystemExit.
              onSigterm: 'exit' as const,
            })),
            (e) => {
              vllmLog('ERROR', 'multiproc_executor.py:310', `Worker proc ${e.child.pid} died unexpectedly, shutting down executor.`);
              if (o.headless) {
                // A TP/PP headless node blocks until one of its workers dies (V:vllm/entrypoints/cli/serve.py:208-222).
                workers?.kill();
                void exit(1, 'a worker died');
              } else failEngine('a worker died');
            },
          )
        : undefined;

    const onTerm = (sig: NodeJS.Signals) => {
      if (o.headless) {
        if (o.dpStartRank !== undefined) {
          // DP headless waits up to shutdown_timeout for its workers (V:vllm/entrypoints/cli/serve.py:248-255).
          vllmLog('INFO', 'serve.py:250', `Received ${sig}, waiting up to ${o.shutdownTimeoutS}s for the engine processes`);
          void (workers?.terminate(o.shutdownTimeoutS * 1000) ?? Promise.resolve()).then(() => exit(0, sig));
        } else {
          // TP/PP headless: SIGTERM raises SystemExit at once, no drain, no wait (V:vllm/entrypoints/cli/serve.py:198-223).
          vllmLog('INFO', 'serve.py:200', `Received ${sig}, exiting`);
          workers?.kill();
          void exit(0, sig);
        }
        return;
      }
      if (phase === 'loading') {
        // A SIGTERM before uvicorn is up stops the start-up (V:vllm/entrypoints/launchers/api_server/entry.py:168-173).
        vllmLog('INFO', 'entry.py:170', `Received ${sig} while starting up; stopping`);
        void (workers?.terminate() ?? Promise.resolve()).then(() => exit(0, `${sig} while loading`));
        return;
      }
      if (phase !== 'serving') return;
      if (o.apiServers > 1) {
        // Several API servers (the default under DP, serve.py:107-124): the
        // main process turns SIGTERM into SystemExit (serve.py:277-286) and
        // its `finally` SIGTERMs the API servers first (serve.py:391-403).
        // Each runs the usual handler, but its engine client was built from
        // client_addresses and has no engine_manager (V:vllm/v1/engine/core_client.py:567-586),
        // so its shutdown drains nothing (:685-696): uvicorn stops at once and
        // every stream is cut, whatever --shutdown-timeout says. Only then are
        // the EngineCores told to drain, with no frontend left to deliver to
        // (serve.py:404-407).
        vllmLog('INFO', 'serve.py:392', `Waiting up to ${o.shutdownTimeoutS} seconds for processes to exit`);
        vllmLog('INFO', 'launcher.py:138', `API server processes (${o.apiServers}): shutting down: the engine client has no engine manager, nothing drains`);
        server?.close();
        server?.closeAllConnections();
        workers?.expectExits();
        scheduler.abortAll('Request aborted: the API server is gone.');
        void (workers?.terminate() ?? Promise.resolve()).then(() => exit(0, `${sig}, ${o.apiServers} API servers`));
        return;
      }
      // V:vllm/entrypoints/launchers/launcher.py:133-155: log the mode, shut the engine down with the timeout, stop uvicorn.
      if (o.shutdownTimeoutS > 0) {
        vllmLog('INFO', 'launcher.py:138', `Received ${sig}, shutting down: mode=drain timeout=${o.shutdownTimeoutS}s`);
        setPhase('draining', sig);
        void drain(o.shutdownTimeoutS * 1000);
      } else {
        vllmLog('INFO', 'launcher.py:138', `Received ${sig}, shutting down: mode=abort timeout=0s`);
        workers?.expectExits();
        scheduler.abortAll('Request aborted: the server is shutting down.');
        void (workers?.terminate() ?? Promise.resolve()).then(() => exit(0, `${sig}, abort`));
      }
    };
    process.on('SIGTERM', onTerm);
    process.on('SIGINT', onTerm);

    /**
     * In-flight requests finish for up to `ms`, the rest are aborted; then
     * the engine ends its workers itself. Drain and teardown share one
     * deadline (V:vllm/v1/engine/utils.py:46-66, 241-254).
     */
    const drain = async (ms: number) => {
      const deadline = Date.now() + ms;
      while (phase === 'draining' && scheduler.running(false) + scheduler.waiting(false) > 0 && Date.now() < deadline) await sleep(20);
      if (phase !== 'draining') return; // a worker died meanwhile: the engine failed instead
      if (scheduler.running(false) + scheduler.waiting(false) > 0) {
        vllmLog('WARNING', 'core.py:1500', 'Drain timed out; aborting the requests left');
        scheduler.abortAll('Request aborted: the drain timed out.');
      }
      await workers?.terminate(Math.max(0, deadline - Date.now()));
      void exit(0, 'drained');
    };

    vllmLog('INFO', 'api_server.py:1', `vLLM API server version ${o.version} (llmgw fake-vllm), pid ${process.pid}`);
    if (o.startError !== undefined) {
      vllmLog('ERROR', 'serve.py:66', o.startError);
      void exit(1, 'refused its arguments');
      return;
    }
    if (o.apiServers > 1) vllmLog('INFO', 'fake-vllm', `${o.apiServers} API server processes (V:vllm/entrypoints/cli/serve.py:107-124, 145-146)`);
    vllmLog('INFO', 'utils.py:1', `non-default args: model=${o.model} tp=${o.tp} pp=${o.pp} nnodes=${o.nnodes} node_rank=${o.nodeRank} dp=${o.dp}`);
    if (o.nnodes > 1 && o.nodeRank === 0) {
      // V:vllm/v1/executor/multiproc_executor.py:148-169; shm_broadcast.py:519-534.
      vllmLog('INFO', 'shm_broadcast.py:519', `binding scheduler-output broadcast queue on ${hostIp(env)}`);
    }

    if (k.failAfterMs !== undefined) {
      later(k.failAfterMs, () => {
        vllmLog('ERROR', 'core.py:1000', 'RuntimeError: CUDA error: an illegal memory access was encountered (--sim-fail-after)');
        if (o.headless) {
          workers?.kill();
          void exit(1, 'CUDA error');
        } else failEngine('CUDA error');
      });
    }
    if (k.stallAfterMs !== undefined) {
      later(k.stallAfterMs, () => {
        vllmLog('WARNING', 'core.py:1190', 'no token produced from here on (--sim-stall-after); /health stays 200');
        scheduler.stall();
      });
    }
    if (k.hangAfterMs !== undefined) {
      later(k.hangAfterMs, () => {
        vllmLog('WARNING', 'shm_broadcast.py:396', 'No available shared memory broadcast block found in 60 second. (--sim-hang-after)');
        hung = true;
        scheduler.stall();
      });
    }

    if (o.headless) {
      // V:vllm/entrypoints/cli/serve.py:63-71, 143-144: headless starts no API server.
      vllmLog('INFO', 'serve.py:210', `headless node rank ${o.nodeRank}: running ${workerCount} worker(s), no API server`);
      return;
    }

    const gpus = (env.CUDA_VISIBLE_DEVICES ?? '').split(',').filter((g) => /^\d+$/.test(g)).map(Number);
    // V:vllm/envs.py:1418: bool(int(os.getenv("VLLM_SERVER_DEV_MODE", "0"))).
    const devMode = /^-?\d+$/.test(env.VLLM_SERVER_DEV_MODE ?? '') && Number(env.VLLM_SERVER_DEV_MODE) !== 0;
    const sleeper = new FakeVllmSleep({ enabled: o.sleepMode, devMode, knobs: k, gpus, fatal: (why) => failEngine(why) }, scheduler);
    sleepMode = sleeper;
    if (o.sleepMode) {
      // The cumem allocator is on from the start (V:vllm/config/model.py:338-340, 606-613): the line tells a
      // test that --enable-sleep-mode reached the engine, which /sleep alone no longer shows (N10).
      vllmLog('INFO', 'fake-vllm', 'Sleep mode enabled: weights and KV cache are allocated through the CuMemAllocator pool');
    }

    const ctx: RouteContext = {
      servedNames: o.servedNames,
      submit: (r) => scheduler.submit(r),
      defaultMaxTokens: k.maxTokens,
      weightsLost: () => sleeper.weightsLost,
    };

    const handle = (req: IncomingMessage, res: ServerResponse) => {
      if (hung) return; // a hung engine accepts the connection and says nothing
      const path = (req.url ?? '/').split('?')[0] as string;
      const method = req.method ?? 'GET';
      // V:vllm/entrypoints/serve/middleware/authenticate.py:11, 59: every path under /v1 needs the key.
      if (o.apiKeys.length > 0 && path.startsWith('/v1') && method !== 'OPTIONS' && !bearerOk(req, o.apiKeys)) {
        sendJson(res, 401, { error: 'Unauthorized' });
        return;
      }
      // /health is 503 once the engine is dead (V:vllm/entrypoints/serve/instrumentator/health.py:22-33):
      // check_health looks only at `errored` (V:vllm/v1/engine/async_llm.py:940-943), so a drain keeps it 200.
      if (method === 'GET' && (path === '/health' || path === '/ping')) {
        res.writeHead(phase === 'serving' || phase === 'draining' ? 200 : 503, { 'content-length': '0' }).end();
        return;
      }
      if (method === 'GET' && path === '/metrics') {
        res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' }).end(metricsText());
        return;
      }
      if (method === 'GET' && path === '/version') {
        sendJson(res, 200, { version: o.version }); // V:vllm/entrypoints/serve/instrumentator/basic.py:53-56
        return;
      }
      if (method === 'GET' && path === '/load' && o.loadTracking) {
        sendJson(res, 200, { server_load: httpInFlight }); // V:vllm/entrypoints/serve/instrumentator/basic.py:30-50
        return;
      }
      if (sleepMode?.handle(req, res, path, method)) return;
      if (method === 'GET' && path === '/v1/models') {
        const list = modelList(servedName, startedS);
        list.data = o.servedNames.map((n) => ({ ...list.data[0]!, id: n, root: o.model }));
        sendJson(res, 200, list);
        return;
      }
      const generation = method === 'POST' && (path === '/v1/chat/completions' || path === '/v1/completions') && o.runner === 'generate';
      const embedding = method === 'POST' && path === '/v1/embeddings' && o.runner === 'pooling';
      if (!generation && !embedding) {
        sendJson(res, 404, { detail: 'Not Found' });
        return;
      }
      if (phase === 'draining') {
        // The API server still takes the request; the shutting-down EngineCore rejects it and it finishes
        // aborted (V:vllm/v1/engine/core.py:1555-1568). Stood in for by an error answer: no token is made.
        sendJson(res, 503, errorBody('The server is shutting down.', 'ServiceUnavailableError', 503), true);
        return;
      }
      if (phase !== 'serving') {
        sendJson(res, 500, errorBody('EngineCore encountered an issue. See stack trace (above) for the root cause.', 'InternalServerError', 500), true);
        return;
      }
      // HTTP requests in flight in the API server, streaming out included (V:vllm/entrypoints/serve/instrumentator/basic.py:30-50).
      httpInFlight++;
      res.on('close', () => httpInFlight--);
      if (embedding) void serveEmbedding(req, res, ctx);
      else void serveGeneration(req, res, path === '/v1/chat/completions' ? 'chat' : 'text', ctx);
    };

    /**
     * V:vllm/v1/metrics/loggers.py: labels model_name and engine (:468-474),
     * running and waiting gauges (:493-511), token counters (:671, 705),
     * none of them with --disable-log-stats (V:vllm/v1/engine/async_llm.py:127, 160).
     */
    const metricsText = (): string => {
      const proc = '# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n# TYPE process_start_time_seconds gauge\n' + `process_start_time_seconds ${startedS}.0\n`;
      if (!o.logStats) return proc;
      const label = `engine="0",model_name="${servedName}"`;
      const one = (type: 'gauge' | 'counter', name: string, help: string, value: number) =>
        `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n${name}{${label}} ${value.toFixed(1)}\n`;
      const success = `# HELP vllm:request_success_total Count of successfully processed requests.\n# TYPE vllm:request_success_total counter\n${(['length', 'stop'] as const).map((r) => `vllm:request_success_total{${label},finished_reason="${r}"} ${counters.success[r].toFixed(1)}\n`).join('')}`;
      return (
        proc +
        one('gauge', 'vllm:num_requests_running', 'Number of requests in model execution batches.', scheduler.running()) +
        one('gauge', 'vllm:num_requests_waiting', 'Number of requests waiting to be processed.', scheduler.waiting()) +
        one('gauge', 'vllm:kv_cache_usage_perc', 'KV-cache usage. 1 means 100 percent usage.', Math.min(1, scheduler.running() * 0.01)) +
        one('counter', 'vllm:prompt_tokens_total', 'Number of prefill tokens processed.', counters.promptTokens) +
        one('counter', 'vllm:generation_tokens_total', 'Number of generation tokens processed.', counters.generationTokens) +
        success +
        (sleepMode?.metricsText(label) ?? '')
      );
    };

    vllmLog('INFO', 'gpu_model_runner.py:1', `Starting to load model ${o.model}...`);
    // The port is bound but not listening while the engine loads, so connects are refused
    // (V:vllm/entrypoints/launchers/launcher.py:205-220, 262-271; api_server/entry.py:175-196).
    // Weights (when read) and the compile come first, --sim-load-time (the rest of start-up) after them.
    const listen = () => {
      if (phase !== 'loading') return;
      server = createServer(handle);
      server.on('error', (err) => {
        vllmLog('ERROR', 'launcher.py:270', `[Errno 98] error while attempting to bind on address (${o.host ?? ''}, ${o.port}): ${err.message}`);
        workers?.kill();
        void exit(1, 'cannot listen');
      });
      server.listen(o.port, o.host, () => {
        servingSinceMs = Date.now();
        setPhase('serving', 'model loaded');
        sleepMode?.loaded();
        vllmLog('INFO', 'launcher.py:106', `Starting vLLM API server 0 on http://${o.host ?? '0.0.0.0'}:${o.port}`);
        vllmLog('INFO', 'on.py:62', 'Application startup complete.');
      });
    };
    if (!k.readWeights && k.compileTimeMs === 0) later(k.loadTimeMs, listen);
    else {
      warmUp(o, env, () => phase !== 'loading', (ms) => new Promise((r) => later(ms, () => r()))).then(
        () => later(k.loadTimeMs, listen),
        (err: unknown) => {
          if (phase !== 'loading') return;
          vllmLog('ERROR', 'core.py:700', err instanceof Error ? err.message : String(err));
          failEngine(err instanceof MissingWeightsError ? 'no weights' : 'loading failed');
        },
      );
    }
  });
}

/**
 * What a start costs before its model serves, by what the node has cached:
 * the weights read from the hub cache (--sim-read-weights), then the
 * compile, skipped when VLLM_CACHE_ROOT holds its marker (--sim-compile-time).
 * `wait` is a timer the engine clears at exit; `stopped` ends the work when
 * the start was stopped meanwhile.
 */
async function warmUp(o: FakeVllmOptions, env: NodeJS.ProcessEnv, stopped: () => boolean, wait: (ms: number) => Promise<void>): Promise<void> {
  const k = o.knobs;
  let revision = o.revision;
  let hashedModel = o.model;
  if (hubOffline(env) && !existsSync(o.model)) {
    // V:vllm/engine/arg_utils.py:809-822 (get_model_path, V:vllm/transformers_utils/repo_utils.py:279-297):
    // offline, the model id becomes its local snapshot folder, and fails the start when there is none.
    hashedModel = (await findSnapshot(o.model, o.revision, env)).dir;
    vllmLog('INFO', 'arg_utils.py:817', `HF_HUB_OFFLINE is True, replace model_id [${o.model}] to model_path [${hashedModel}]`);
  }
  if (k.readWeights) {
    const t0 = performance.now();
    const read = await readWeights(o.model, o.revision, env, stopped);
    if (stopped()) return;
    revision = read.commit;
    const s = ((performance.now() - t0) / 1000).toFixed(2);
    vllmLog('INFO', 'default_loader.py:291', `Loading weights took ${s} seconds: ${read.files} files, ${read.bytes} bytes from ${read.snapshotDir}`);
  }
  if (k.compileTimeMs === 0) return;
  const key: CompileKey = { model: hashedModel, revision, tp: o.tp, pp: o.pp, version: o.version, sleepMode: o.sleepMode };
  const marker = compileMarkerPath(env, key);
  if (await hasCompileMarker(marker)) {
    // V:vllm/compilation/backends.py logs this line on a cache hit.
    vllmLog('INFO', 'backends.py:210', `Directly load the compiled graph(s) for dynamic shape from the cache (${marker})`);
    return;
  }
  vllmLog('INFO', 'backends.py:600', `Compiling a graph for dynamic shape (--sim-compile-time ${k.compileTimeMs} ms; no compiled graph at ${marker})`);
  await wait(k.compileTimeMs);
  if (stopped()) return;
  await writeCompileMarker(marker, key, k.compileTimeMs);
  vllmLog('INFO', 'monitor.py:34', `torch.compile takes ${(k.compileTimeMs / 1000).toFixed(2)} s in total`);
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  if (argv[0] !== 'serve') {
    printArgparseError('vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ...', 'vllm', `argument subparser: invalid choice: '${argv[0] ?? ''}' (the double knows only serve)`);
    process.exit(ARGPARSE_EXIT);
  }
  let opts: FakeVllmOptions;
  try {
    opts = parseFakeVllmArgv(argv.slice(1));
  } catch (err) {
    if (!(err instanceof ArgparseError)) throw err;
    printArgparseError(USAGE, PROG, err.message);
    process.exit(ARGPARSE_EXIT);
  }
  process.exit(await runFakeVllm(opts));
}

if (process.argv[1] && fileURLToPath(import.meta.url) === resolve(process.argv[1])) await main();
