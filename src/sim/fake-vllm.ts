/**
 * A test double of `vllm serve` (bin/fake-vllm): it takes vLLM's own command
 * line and behaves as vLLM's source says it does (the citations are to
 * vLLM 2f41c894, V:path:line, as read in shared/reviews/engine-fidelity.md
 * and shared/fixtures/engines/ENGINES.md). Knobs vLLM does not have start
 * with --sim- (sim-knobs.ts).
 *
 * This file is the engine's life: its phases, its scheduler and worker
 * processes, start-up, failure and shutdown. Its command line is
 * fake-vllm-args.ts, its routes fake-vllm-routes.ts, its metrics
 * fake-vllm-metrics.ts, its warm-up fake-vllm-warmup.ts, sleep mode
 * fake-vllm-sleep.ts.
 */
import { type IncomingMessage, type Server, createServer } from 'node:http';
import { resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { EngineChildren } from './engine-children.js';
import { ARGPARSE_EXIT, ArgparseError, printArgparseError } from './engine-argv.js';
import { vllmLog } from './engine-log.js';
import { FakeBatchScheduler } from './fake-batch-scheduler.js';
import type { RouteContext } from './fake-openai-routes.js';
import { type FakeVllmOptions, hostIp, localWorkers, parseFakeVllmArgv } from './fake-vllm-args.js';
import { startVllmGang } from './fake-vllm-gang.js';
import { FakeVllmLora } from './fake-vllm-lora.js';
import { FakeVllmMetrics } from './fake-vllm-metrics.js';
import { vllmHandler } from './fake-vllm-routes.js';
import { FakeVllmSleep } from './fake-vllm-sleep.js';
import { FakeSpecDecode } from './fake-vllm-sleep-faults.js';
import { VLLM_NEXT, type VllmPhase, type VllmState } from './fake-vllm-state.js';
import { warmUp } from './fake-vllm-warmup.js';
import { weightsTokenOffset } from './openai-responses.js';
import { MissingWeightsError, readWeights } from './fake-weights.js';

/** V:vllm/entrypoints/cli/serve.py:163. */
const USAGE = 'vllm serve [model_tag] [options]';
const PROG = 'vllm serve';

/** How long an exit waits for finished answers to leave before closing the sockets. */
const FLUSH_MS = 500;

/** Runs the double until it exits; resolves with its exit status. */
export function runFakeVllm(o: FakeVllmOptions, env: NodeJS.ProcessEnv = process.env): Promise<number> {
  return new Promise<number>((resolveExit) => {
    const k = o.knobs;
    const startedS = Math.floor(Date.now() / 1000);
    const servedName = o.servedNames[0] as string;
    const timers: NodeJS.Timeout[] = [];
    const st: VllmState = { phase: 'loading', hung: false };
    let server: Server | undefined;
    let servingSinceMs = 0;
    /** Sleep mode's routes and memory; none on a headless rank. */
    let sleepMode: FakeVllmSleep | undefined;

    const later = (ms: number, fn: () => void) => timers.push(setTimeout(fn, ms));
    // Nothing else may hold the loop while loading or headless.
    timers.push(setInterval(() => {}, 1 << 30));

    const setPhase = (next: VllmPhase, why: string) => {
      if (!VLLM_NEXT[st.phase].includes(next)) throw new Error(`fake-vllm: no transition ${st.phase} -> ${next}`);
      vllmLog('INFO', 'fake-vllm', `phase ${st.phase} -> ${next}: ${why}`);
      st.phase = next;
    };

    const scheduler: FakeBatchScheduler = new FakeBatchScheduler(
      // At most --max-loras adapters in a batch (fake-vllm-lora.ts); `lora` exists before any request does.
      { maxRunning: k.maxRunning, tokenLatencyMs: k.tokenLatencyMs, embedLatencyMs: k.embedLatencyMs, policy: o.schedulingPolicy, admits: (r, running): boolean => lora.admits(r, running) },
      // When each counts, with its citation, is FakeVllmMetrics'.
      {
        prefill: (r) => metrics.prefill(r),
        token: () => {
          metrics.token();
          spec.token();
        },
        finish: (r) => metrics.finish(r),
      },
    );
    const metrics = new FakeVllmMetrics(o, servedName, startedS, scheduler);
    // --speculative-config: a draft accepted until a level-2 sleep discards it (fake-vllm-sleep-faults.ts).
    const spec = new FakeSpecDecode(o.speculative, () => scheduler.slowDown(2));

    const exit = async (code: number, why: string) => {
      if (st.phase === 'exiting') return;
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
     * watchdog makes it exit at its next look (V:vllm/v1/engine/async_llm.py:940-943;
     * V:vllm/entrypoints/launchers/launcher.py:180-202).
     */
    const failEngine = (why: string) => {
      if (st.phase === 'failed' || st.phase === 'exiting') return;
      const wasServing = server !== undefined;
      setPhase('failed', why);
      vllmLog('ERROR', 'core.py:1548', 'EngineCore encountered a fatal error: Executor failed.');
      scheduler.abortAll('EngineCore encountered an issue. See stack trace (above) for the root cause.');
      void workers?.terminate();
      if (!wasServing) {
        void exit(1, 'the engine failed while loading');
        return;
      }
      // The API server's engine watchdog looks every 5 s (V:vllm/entrypoints/launchers/launcher.py:180-202); --sim-engine-watchdog in tests.
      const watchdogMs = Math.max(1, k.engineWatchdogMs);
      const sinceTick = (Date.now() - servingSinceMs) % watchdogMs;
      later(watchdogMs - sinceTick, () => {
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
            // Node workers until test/sim/fake-vllm.test.ts waits for the port (engine-children.ts says why).
            { nodeChildren: true },
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
      if (st.phase === 'loading') {
        // A SIGTERM before uvicorn is up stops the start-up (V:vllm/entrypoints/launchers/api_server/entry.py:168-173).
        vllmLog('INFO', 'entry.py:170', `Received ${sig} while starting up; stopping`);
        void (workers?.terminate() ?? Promise.resolve()).then(() => exit(0, `${sig} while loading`));
        return;
      }
      if (st.phase !== 'serving') return;
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
      while (st.phase === 'draining' && scheduler.running(false) + scheduler.waiting(false) > 0 && Date.now() < deadline) await sleep(20);
      if (st.phase !== 'draining') return; // a worker died meanwhile: the engine failed instead
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
        // Defined at V:vllm/distributed/device_communicators/shm_broadcast.py:103-107, logged at INFO from acquire_write (:679-682).
        vllmLog('INFO', 'shm_broadcast.py:679', 'No available shared memory broadcast block found in 60 seconds. (--sim-hang-after)');
        st.hung = true;
        scheduler.stall();
      });
    }

    // Ranks across nodes (fake-vllm-gang.ts): the store bound late, the DP handshake closed once up, a peer lost.
    const gang = startVllmGang({ o, env, scheduler, failEngine: (why) => failEngine(why), log: vllmLog });
    process.once('exit', () => gang.close());

    if (o.headless) {
      // V:vllm/entrypoints/cli/serve.py:63-71, 143-144: headless starts no API server.
      vllmLog('INFO', 'serve.py:210', `headless node rank ${o.nodeRank}: running ${workerCount} worker(s), no API server`);
      later(k.loadTimeMs, () => gang.headlessLoaded());
      return;
    }

    const gpus = (env.CUDA_VISIBLE_DEVICES ?? '').split(',').filter((g) => /^\d+$/.test(g)).map(Number);
    // V:vllm/envs.py:1418: bool(int(os.getenv("VLLM_SERVER_DEV_MODE", "0"))).
    const devMode = /^-?\d+$/.test(env.VLLM_SERVER_DEV_MODE ?? '') && Number(env.VLLM_SERVER_DEV_MODE) !== 0;
    const sleeper = new FakeVllmSleep({ enabled: o.sleepMode, devMode, knobs: k, gpus, fatal: (why) => failEngine(why), version: o.version, dp: o.dp, loadFormat: o.loadFormat, spec }, scheduler);
    sleepMode = sleeper;
    if (o.sleepMode) {
      // The cumem allocator is on from the start (V:vllm/config/model.py:338-340, 606-613): the line tells a
      // test that --enable-sleep-mode reached the engine, which /sleep alone no longer shows (N10).
      vllmLog('INFO', 'fake-vllm', 'Sleep mode enabled: weights and KV cache are allocated through the CuMemAllocator pool');
    }

    const lora: FakeVllmLora = new FakeVllmLora(o.lora, env, scheduler, (why) => failEngine(why));
    // --lora-modules are loaded before the server answers; one that cannot be ends the start (init_static_loras).
    const staticLoraError = lora.startModules();
    if (staticLoraError !== undefined) {
      vllmLog('ERROR', 'serving.py:139', staticLoraError);
      failEngine(staticLoraError);
    }
    // The weights read (--sim-read-weights) decide the answers: another checkpoint, another answer (issue 51).
    let weightsOffset = 0;
    const ctx: RouteContext = {
      lora,
      servedNames: o.servedNames,
      submit: (r) => scheduler.submit(r),
      defaultMaxTokens: k.maxTokens,
      weightsLost: () => sleeper.weightsLost,
      tokenOffset: () => weightsOffset,
      tokenIdsField: true,
      refuse: (req) => dpRankRefusal(req, o.dp),
    };
    const handle = vllmHandler({ o, st, startedS, servedName, metrics, sleepMode, ctx, lora });

    vllmLog('INFO', 'gpu_model_runner.py:1', `Starting to load model ${o.model}...`);
    // The port is bound but not listening while the engine loads, so connects are refused
    // (V:vllm/entrypoints/launchers/launcher.py:205-220, 262-271; api_server/entry.py:175-196).
    // Weights (when read) and the compile come first, --sim-load-time (the rest of start-up) after them.
    const listen = () => {
      if (st.phase !== 'loading') return;
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
    // Loaded: a DP rank 0 serves once every remote engine is up too, and closes its handshake port first.
    const serve = () => {
      const localUp = new Promise<void>((r) => later(k.loadTimeMs, r));
      void gang.beforeServe(localUp).then(listen);
    };
    // SIGUSR2 (--sim-read-weights only): the weights read again, and answered by, with the process kept, as
    // when a weight daemon starts serving another checkpoint of the same layout under the engine (issue 51).
    const reloadWeights = () => {
      readWeights(o.model, o.revision, env, () => false, { engine: 'vllm', loadFormat: o.loadFormat, ...(o.tokenizer ? { tokenizer: o.tokenizer } : {}), ...(o.draft ? { draft: o.draft } : {}) }).then((read) => {
        weightsOffset = weightsTokenOffset(read.digest);
        vllmLog('INFO', 'sim', `weights read again (SIGUSR2): ${read.files} files, ${read.bytes} bytes from ${read.snapshotDir}`);
      }, (err: unknown) => vllmLog('ERROR', 'sim', `weights not read again (SIGUSR2): ${err instanceof Error ? err.message : String(err)}`));
    };
    const load = () => {
      if (!k.readWeights && k.compileTimeMs === 0) return serve();
      warmUp(o, env, () => st.phase !== 'loading', (ms) => new Promise((r) => later(ms, () => r()))).then((digest) => {
        weightsOffset = weightsTokenOffset(digest);
        if (k.readWeights) process.on('SIGUSR2', reloadWeights);
        serve();
      }, (err: unknown) => {
        if (st.phase !== 'loading') return;
        vllmLog('ERROR', 'core.py:700', err instanceof Error ? err.message : String(err));
        failEngine(err instanceof MissingWeightsError ? 'no weights' : 'loading failed');
      });
    };
    // The load starts once the TCPStore is bound (--sim-store-bind-after).
    void gang.beforeLoad.then(load);
  });
}

/**
 * A request for a DP rank its API server does not front: X-data-parallel-rank
 * is read as an int, anything else ignored (V:vllm/entrypoints/generate/base/serving.py:205-218),
 * and a rank outside [0, dp) is a validation error, a 400
 * (V:vllm/v1/engine/input_processor.py:299-307; one API server fronts every rank).
 */
function dpRankRefusal(req: IncomingMessage, dp: number): { status: number; message: string; type: string } | undefined {
  const given = req.headers['x-data-parallel-rank'];
  const rank = typeof given === 'string' && /^[+-]?\d+$/.test(given.trim()) ? Number(given) : undefined;
  if (rank === undefined || (rank >= 0 && rank < dp)) return undefined;
  return { status: 400, message: `data_parallel_rank ${rank} is out of range [0, ${dp}).`, type: 'BadRequestError' };
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
