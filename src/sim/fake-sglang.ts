/**
 * A test double of SGLang's server (bin/fake-sglang): it takes `sglang serve`
 * / `python3 -m sglang.launch_server` command lines and behaves as SGLang's
 * source says it does (citations to SGLang v0.5.18, S:path:line, as read in
 * shared/reviews/engine-fidelity.md and shared/fixtures/engines/ENGINES.md).
 * Knobs SGLang does not have start with --sim- (sim-knobs.ts).
 *
 * This file is the server's life: its phases, its scheduler and child
 * processes, start-up, failure and the SIGTERM drain. Its command line is
 * fake-sglang-args.ts, its routes fake-sglang-routes.ts, its metrics
 * fake-sglang-metrics.ts, /pause_generation and the weight-update lock
 * fake-sglang-pause.ts, the memory saver fake-sglang-memory-saver.ts.
 */
import { type Server, createServer } from 'node:http';
import { resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { EngineChildren } from './engine-children.js';
import { sglangLog } from './engine-log.js';
import { MissingWeightsError, readWeights } from './fake-weights.js';
import { startSimRendezvous } from './sim-rendezvous.js';
import { FakeBatchScheduler, type SchedRequest } from './fake-batch-scheduler.js';
import type { RouteContext } from './fake-openai-routes.js';
import { FakeRadixCache } from './fake-radix-cache.js';
import { DEFAULT_SGLANG_VERSION, type FakeSglangOptions, sglangCommandLine } from './fake-sglang-args.js';
import { FakeSglangLora } from './fake-sglang-lora.js';
import { FakeSglangMemorySaver } from './fake-sglang-memory-saver.js';
import { FakeSglangMetrics, IDLE_METRICS_MS } from './fake-sglang-metrics.js';
import { FakeSglangPause } from './fake-sglang-pause.js';
import { healthCheckTimeoutMs, sglangHandler, startDummyServer } from './fake-sglang-routes.js';
import { SGLANG_NEXT, type SglangPhase, type SglangState } from './fake-sglang-state.js';
import { sglangCompile } from './fake-compile-cache.js';
import { weightsTokenOffset } from './openai-responses.js';

/** The scheduler loop, talking to the gang's peers each time round (sim-rendezvous.ts `loopMs`). */
const SCHEDULER_LOOP_MS = 20;

/** SubprocessWatchdog's period (S:python/sglang/srt/utils/watchdog.py:166-222). */
const WATCHDOG_MS = 1000;

/** After ShutdownReq the drain waits up to 15 s for the schedulers (S:python/sglang/srt/managers/tokenizer_manager.py:3114-3158). */
const SCHEDULER_SHUTDOWN_MS = 15_000;

/** How long an exit waits for finished answers to leave before closing the sockets. */
const FLUSH_MS = 500;

/** Runs the double until it exits; resolves with its exit status (a failure SIGKILLs itself instead, as SGLang does). */
export function runFakeSglang(o: FakeSglangOptions, env: NodeJS.ProcessEnv = process.env): Promise<number> {
  return new Promise<number>((resolveExit) => {
    const k = o.knobs;
    const startedS = Math.floor(Date.now() / 1000);
    const timers: NodeJS.Timeout[] = [];
    // The fields' citations are in fake-sglang-state.ts.
    const st: SglangState = { phase: 'loading', unhealthy: false, hung: false, lastOutputAt: 0, servedName: o.servedName, modelPath: o.model };
    let server: Server | undefined;
    let sigtermHandled = false;
    const healthTimeoutMs = healthCheckTimeoutMs(env);
    const radix = new FakeRadixCache();
    /** Prompt tokens of a request served from the prefix cache, set when it is submitted. */
    const cacheHits = new WeakMap<SchedRequest, number>();
    /** The prompt of a request, inserted into the cache at its prefill. */
    const prompts = new WeakMap<SchedRequest, string[]>();

    const later = (ms: number, fn: () => void) => timers.push(setTimeout(fn, ms));
    timers.push(setInterval(() => {}, 1 << 30));
    // An idle scheduler writes its gauges at least every 30 s (metrics_reporter.py:1169-1175).
    timers.push(setInterval(() => metrics.idleTick(), IDLE_METRICS_MS));

    const setPhase = (next: SglangPhase, why: string) => {
      if (!SGLANG_NEXT[st.phase].includes(next)) throw new Error(`fake-sglang: no transition ${st.phase} -> ${next}`);
      sglangLog('INFO', `[fake-sglang] phase ${st.phase} -> ${next}: ${why}`);
      st.phase = next;
    };

    // The scheduler's metrics hooks, with their citations, are FakeSglangMetrics'.
    const scheduler: FakeBatchScheduler = new FakeBatchScheduler(
      { maxRunning: k.maxRunning, tokenLatencyMs: k.tokenLatencyMs, embedLatencyMs: k.embedLatencyMs, admits: (r, running): boolean => lora.admits(r, running) },
      {
        prefill: (r) => {
          st.lastOutputAt = Date.now();
          const words = prompts.get(r);
          if (words) radix.insert(words);
          metrics.prefill(r, cacheHits.get(r) ?? 0);
        },
        token: (r, i) => {
          st.lastOutputAt = Date.now();
          metrics.token(r, i);
        },
        finish: (r) => metrics.finish(r),
        changed: () => metrics.changed(),
      },
    );
    const metrics = new FakeSglangMetrics(o, scheduler);
    const lora: FakeSglangLora = new FakeSglangLora(o.lora, () => st.servedName, scheduler);

    /** Ends the server; `killSelf`: by SIGKILL to this process, as kill_process_tree(include_parent=True) does, not by an exit code. */
    const exit = async (code: number, why: string, killSelf = false) => {
      if (st.phase === 'exiting') return;
      setPhase('exiting', why);
      for (const t of timers) clearTimeout(t);
      memory.gone();
      if (server) {
        const closed = new Promise((r) => server?.close(r));
        server.closeIdleConnections();
        await Promise.race([closed, sleep(FLUSH_MS)]);
        server.closeAllConnections();
      }
      if (killSelf) {
        sglangLog('INFO', 'Killing the process tree (include_parent=True)');
        process.kill(process.pid, 'SIGKILL');
        return;
      }
      resolveExit(code);
    };

    /**
     * A child failed: the main process gets SIGQUIT and runs
     * kill_process_tree on itself (S:python/sglang/srt/utils/watchdog.py:203-222;
     * tokenizer_manager.py:3630-3639), which SIGKILLs every child and then
     * the process itself, so in-flight requests are cut.
     */
    const killTree = (why: string) => {
      sglangLog('ERROR', `${why}`);
      sglangLog('ERROR', 'Received sigquit from a child process. It usually means the child failed.');
      children.kill();
      memory.gone();
      server?.closeAllConnections();
      process.kill(process.pid, 'SIGKILL');
    };

    const gpus = (env.CUDA_VISIBLE_DEVICES ?? '').split(',').filter((g) => /^\d+$/.test(g)).map(Number);
    const memory = new FakeSglangMemorySaver({
      enabled: o.memorySaver,
      cpuBackup: o.weightsCpuBackup,
      model: o.model,
      tp: o.tp,
      knobs: k,
      gpus,
      // Scheduler.is_fully_idle counts every request, health checks too (S:python/sglang/srt/managers/scheduler.py:4083-4105).
      isIdle: () => scheduler.running(false) + scheduler.waiting(false) === 0,
      crash: (why) => killTree(why),
      updateLock: () => pause.updateLock(),
      reloaded: (path) => {
        st.servedName = path;
        st.modelPath = path;
        // A weight update flushes the cache (flush_cache defaults to true: io_struct.py:1762-1763; weight_updater.py:103-108).
        radix.reset();
      },
      flushCache: () => radix.reset(),
    });

    // tp × pp schedulers on this node, and the detokenizer on rank 0 only
    // (ranks ≥ 1 run only schedulers plus the dummy health server: S:python/sglang/srt/entrypoints/engine.py:955-961, 1150-1169).
    const schedulers = Math.max(1, Math.ceil((o.tp * o.pp) / o.nnodes));
    const specs = Array.from({ length: schedulers }, (_, i) => ({
      readyLine: `[fake-sglang] Scheduler proc {pid} ready (tp_rank=${i % o.tp} pp_rank=${Math.floor(i / o.tp) % o.pp})`,
      // No SIGTERM handler in the schedulers (review §0 #2): SIGTERM kills them.
      onSigterm: 'default' as const,
    }));
    if (o.nodeRank === 0) specs.push({ readyLine: '[fake-sglang] Detokenizer proc {pid} ready', onSigterm: 'default' });
    const children = new EngineChildren(specs, () => {});
    // SubprocessWatchdog: every second, a child that exited non-zero or by a signal ends everything.
    timers.push(
      setInterval(() => {
        // Not the children its own drain ends: the real drain's kill_process_tree ends them and itself in one call (below), unwatched.
        const dead = children.exits.find((e) => e.code !== 0 && !e.expected);
        if (dead && st.phase !== 'exiting') {
          killTree(`Subprocess pid ${dead.child.pid} exited unexpectedly (code=${dead.code}, signal=${dead.signal}); killing the process tree`);
        }
      }, WATCHDOG_MS),
    );

    /**
     * SIGTERM sets gracefully_exit (tokenizer_manager.py:3624-3628); the drain
     * loop then looks every 5 s until no request is left, stops at once when
     * the server is UnHealthy or SGL_FORCE_SHUTDOWN is set, sends ShutdownReq
     * to the schedulers and waits for them (tokenizer_manager.py:3114-3158).
     * What it counts is the tokenizer's rid_to_state (:3120), not the
     * scheduler's batch: a request enters it before it waits out a pause
     * (:796 _init_req_state, then :804-805), so the requests /pause_generation
     * holds count, and a paused server never drains; health checks count too
     * until their handler pops them (http_server.py:711, 723).
     */
    const onTerm = async (sig: NodeJS.Signals) => {
      if (st.phase === 'draining' || st.phase === 'exiting') return;
      sglangLog('INFO', `Received ${sig}; gracefully exiting`);
      setPhase('draining', sig);
      for (;;) {
        if (env.SGL_FORCE_SHUTDOWN !== undefined) {
          sglangLog('INFO', 'SGL_FORCE_SHUTDOWN is set; exiting without waiting for requests');
          break;
        }
        await sleep(k.drainPollMs);
        if (st.unhealthy) {
          // A /health_generate that timed out set UnHealthy (http_server.py:723): no drain at all.
          sglangLog('ERROR', 'Signal SIGTERM received while health check failed. Force exiting.');
          break;
        }
        const remaining = scheduler.running(false) + scheduler.waiting(false) + pause.heldCount();
        if (remaining === 0) break;
        sglangLog('INFO', `Gracefully exiting... Remaining number of requests ${remaining}.`);
      }
      scheduler.abortAll('The server is shutting down.');
      children.expectExits();
      await children.terminate(SCHEDULER_SHUTDOWN_MS);
      // The drain ends in kill_process_tree(include_parent=True), which SIGKILLs
      // the main process itself (S:python/sglang/srt/utils/common.py:2259-2261):
      // even a clean drain exits by signal 9.
      void exit(0, 'drained', true);
    };
    /**
     * The handler is installed lazily, by the first generate request, in the
     * main thread (S:python/sglang/srt/managers/tokenizer_manager.py:2174-2193);
     * until then SIGTERM kills the process.
     */
    const installSigterm = () => {
      if (sigtermHandled) return;
      sigtermHandled = true;
      process.on('SIGTERM', (s) => void onTerm(s));
    };

    // New requests wait in the tokenizer while paused or updating weights; the weights read decide the answers (issue 51).
    let weightsOffset = 0;
    const pause: FakeSglangPause = new FakeSglangPause({ scheduler, memory, killTree, installSigterm, continueBusyMs: k.wakeQueueDelayMs });
    const submit = (req: SchedRequest) => pause.submit(req);
    const ctx: RouteContext = {
      // SGLang takes any model name (the OpenAI routes never compare it); the double
      // takes the names it has served under, so a request is not refused after a reload.
      get servedNames() {
        return st.servedName === o.servedName ? [o.servedName] : [o.servedName, st.servedName];
      },
      submit,
      lora,
      defaultMaxTokens: k.maxTokens,
      weightsLost: () => memory.weightsLost,
      tokenOffset: () => weightsOffset,
      // --max-queued-requests: one more than the waiting queue holds is aborted 503, a plain request's
      // HTTPException (S:python/sglang/srt/managers/scheduler.py:2767-2814; tokenizer_manager.py:1710-1728).
      refuse: () =>
        o.maxQueuedRequests !== undefined && scheduler.waiting(false) + 1 > o.maxQueuedRequests
          ? { status: 503, message: 'The request queue is full.', type: 'ServiceUnavailable' }
          : undefined,
    };

    sglangLog('INFO', `server_args=ServerArgs(model_path='${o.model}', host='${o.host}', port=${o.port}, tp_size=${o.tp}, pp_size=${o.pp}, nnodes=${o.nnodes}, node_rank=${o.nodeRank}) (llmgw fake-sglang ${DEFAULT_SGLANG_VERSION}, pid ${process.pid})`);
    // ServerArgs' LoRA assertions end the launch before anything starts (fake-sglang-args.ts loraOptions).
    if (o.startError) return void exit(1, o.startError);

    if (k.failAfterMs !== undefined) {
      // A scheduler that raises sends SIGQUIT to its parent (S:python/sglang/srt/managers/scheduler.py:5066-5069).
      later(k.failAfterMs, () => killTree('Scheduler hit an exception: RuntimeError: CUDA error: an illegal memory access was encountered (--sim-fail-after)'));
    }
    if (k.stallAfterMs !== undefined) {
      later(k.stallAfterMs, () => {
        sglangLog('WARNING', '[fake-sglang] no token produced from here on (--sim-stall-after)');
        scheduler.stall();
      });
    }
    if (k.hangAfterMs !== undefined) {
      later(k.hangAfterMs, () => {
        sglangLog('WARNING', '[fake-sglang] answering nothing from here on (--sim-hang-after)');
        st.hung = true;
        scheduler.stall();
      });
    }

    if (o.nnodes > 1 && o.distInitAddr !== undefined) {
      // The gang's rendezvous (sim-rendezvous.ts), talked over on every scheduler loop, idle or not: with
      // tp_size != 1 recv_requests runs broadcast_pyobj over the TP group's gloo CPU group
      // (S:python/sglang/srt/managers/scheduler.py:1719-1727; scheduler_components/request_receiver.py:76-93,
      // 153-216; utils/common.py:2390-2432, no try).
      let watch: NodeJS.Timeout | undefined;
      let watchdog: NodeJS.Timeout | undefined;
      const rdv = startSimRendezvous({
        addr: o.distInitAddr,
        leader: o.nodeRank === 0,
        loopMs: SCHEDULER_LOOP_MS,
        log: (level, _where, text) => sglangLog(level, text),
        // A peer whose process died closed its gloo sockets: the next broadcast raises, the scheduler's
        // `except Exception` SIGQUITs its parent, which kills the tree (S:python/sglang/srt/managers/scheduler.py:5066-5069);
        // every rank, rank 0 and the others alike, is gone within about a second (:5070-5071).
        onPeerLost: () => killTree('Scheduler hit an exception: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer'),
        // A silent peer (hung, stopped, cut off: no FIN) blocks the broadcast: nothing makes progress, up to
        // gloo's timeout (S:python/sglang/srt/distributed/parallel_state.py:292) or, with a request in a forward
        // step, --watchdog-timeout (S:python/sglang/srt/server_args.py:1246-1250) on rank 0; a rank ≥ 1 answers
        // its dummy /health 200 all along (S:python/sglang/srt/utils/common.py:3273-3296).
        onPeerSilent: () => {
          scheduler.stall();
          if (o.nodeRank !== 0) return;
          watch = setInterval(() => {
            if (scheduler.running(false) === 0) return;
            clearInterval(watch);
            watchdog = setTimeout(() => killTree(`Scheduler watchdog timeout (self.watchdog_timeout=${o.watchdogTimeoutS}, self.soft=False)`), o.watchdogTimeoutS * 1000);
          }, 1000);
        },
        onPeerBack: () => {
          clearInterval(watch);
          clearTimeout(watchdog);
          if (k.stallAfterMs === undefined && !st.hung) scheduler.unstall();
        },
      });
      process.once('exit', () => rdv.close());
    }

    const handle = sglangHandler({
      o,
      env,
      st,
      startedS,
      healthTimeoutMs,
      memory,
      pause,
      metrics,
      ctx,
      lora,
      prompt: (r, words) => {
        cacheHits.set(r, radix.match(words));
        prompts.set(r, words);
      },
    });

    // No HTTP until every scheduler is ready (S:python/sglang/srt/entrypoints/engine.py:1222-1243).
    sglangLog('INFO', `Load weight begin. (model ${o.model})`);
    // --sim-read-weights: every byte of the weights read from the hub cache, as DefaultModelLoader does for a
    // model that is not a local directory (S:python/sglang/srt/model_loader/loader.py, _prepare_weights and
    // download_weights_from_hf, at 005cbe0e): from disk or the page cache as the node has them, and a start with
    // none there offline is a scheduler that raises, so the server dies (S:python/sglang/srt/managers/scheduler.py:5066-5069).
    const weights: Promise<boolean> = k.readWeights
      ? readWeights(o.model, o.revision, env, () => st.phase !== 'loading', { engine: 'sglang', ...(o.tokenizer ? { tokenizer: o.tokenizer } : {}), ...(o.draft ? { draft: o.draft } : {}) }).then(
          (read) => {
            sglangLog('INFO', `Load weight end. read ${read.files} files, ${read.bytes} bytes from ${read.snapshotDir}`);
            weightsOffset = weightsTokenOffset(read.digest);
            return true;
          },
          (err: unknown) => {
            killTree(`Scheduler hit an exception: ${err instanceof MissingWeightsError ? 'OSError: ' : ''}${err instanceof Error ? err.message : String(err)}`);
            return false;
          },
        )
      : Promise.resolve(true);
    // --sim-compile-time: SGLang's torch.compile cache (fake-compile-cache.ts), after the weights.
    const compiled = weights.then(
      (loaded) =>
        loaded &&
        (k.compileTimeMs === 0 ||
          sglangCompile(env, o.model, 'sim', { log: (_where, m) => sglangLog('INFO', m), wait: (ms) => new Promise((r) => later(ms, () => r())), stopped: () => st.phase !== 'loading', compileTimeMs: k.compileTimeMs }).then(
            () => true,
            (err: unknown) => {
              killTree(`Scheduler hit an exception: ${err instanceof Error ? err.message : String(err)}`);
              return false;
            },
          )),
    );
    // --lora-paths are loaded with the model; one that cannot be fails the scheduler (fake-sglang-lora.ts).
    const loraUp = async () => { const err = await lora.start(); if (err) killTree(`Scheduler hit an exception: ValueError: ${err}`); return !err; };
    void compiled.then(async (loaded) => loaded && (await loraUp()) && later(k.loadTimeMs, () => {
      if (st.phase !== 'loading') return;
      sglangLog('INFO', 'Load weight end.');
      memory.loaded();
      if (o.nodeRank >= 1) {
        setPhase('up', 'schedulers ready (worker rank)');
        server = startDummyServer(o, metrics);
        return;
      }
      server = createServer(handle);
      server.on('error', (err) => {
        sglangLog('ERROR', `cannot listen on ${o.host}:${o.port}: ${err.message}`);
        killTree('the HTTP server failed');
      });
      server.listen(o.port, o.host, () => {
        sglangLog('INFO', `Uvicorn running on http://${o.host}:${o.port} (Press CTRL+C to quit)`);
        if (o.skipWarmup) {
          // S:python/sglang/srt/entrypoints/http_server.py:2392-2397: Up at once.
          setPhase('up', '--skip-server-warmup');
          return;
        }
        // Status stays Starting until a warmup generation succeeds (http_server.py:2186-2213, 2300-2313).
        setPhase('starting', 'warming up');
        submit({
          promptTokens: 1,
          maxTokens: 1,
          finishReason: 'length',
          pooling: o.embedding,
          internal: true,
          onFinish: () => {
            if (st.phase !== 'starting') return;
            setPhase('up', 'warmup done');
            sglangLog('INFO', 'The server is fired up and ready to roll!');
          },
        });
      });
    }));
  });
}

async function main(): Promise<void> {
  process.exit(await runFakeSglang(sglangCommandLine(process.argv.slice(2))));
}

if (process.argv[1] && fileURLToPath(import.meta.url) === resolve(process.argv[1])) await main();
