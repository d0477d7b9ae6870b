/**
 * A test double of SGLang's server (bin/fake-sglang): it takes `sglang serve`
 * / `python3 -m sglang.launch_server` command lines and behaves as SGLang's
 * source says it does (citations to SGLang v0.5.18, S:path:line, as read in
 * shared/reviews/engine-fidelity.md and shared/fixtures/engines/ENGINES.md).
 * Knobs SGLang does not have start with --sim- (sim-knobs.ts).
 */
import { type IncomingMessage, type Server, type ServerResponse, createServer } from 'node:http';
import { resolve } from 'node:path';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { EngineChildren } from './engine-children.js';
import { ARGPARSE_EXIT, type ArgSpec, ArgparseError, parseArgv, printArgparseError } from './engine-argv.js';
import { sglangLog } from './engine-log.js';
import { FakeBatchScheduler, type SchedRequest } from './fake-batch-scheduler.js';
import { FakeSglangMemorySaver, readBodyObject } from './fake-sglang-memory-saver.js';
import { type RouteContext, bearerOk, serveEmbedding, serveGeneration } from './fake-openai-routes.js';
import { FakeRadixCache, promptWords } from './fake-radix-cache.js';
import { readBody, sendJson } from './sim-http.js';
import { errorBody } from './openai-responses.js';
import { SIM_KNOB_SPECS, type SimKnobs, simKnobs } from './sim-knobs.js';

export const DEFAULT_SGLANG_VERSION = '0.5.18';

/** S:python/sglang/srt/server_args.py:1277-1278. */
const DEFAULT_HOST = '127.0.0.1';
const DEFAULT_PORT = 30000;

/** /health_generate sleeps this long before its first look (S:python/sglang/srt/entrypoints/http_server.py:654-711). */
const HEALTH_FIRST_LOOK_MS = 1000;
const HEALTH_POLL_MS = 1000;

/** SGLANG_HEALTH_CHECK_TIMEOUT's default, in seconds (S:python/sglang/srt/entrypoints/http_server.py:192). */
const DEFAULT_HEALTH_CHECK_TIMEOUT_S = 20;

/** SubprocessWatchdog's period (S:python/sglang/srt/utils/watchdog.py:166-222). */
const WATCHDOG_MS = 1000;

/** After ShutdownReq the drain waits up to 15 s for the schedulers (S:python/sglang/srt/managers/tokenizer_manager.py:3114-3158). */
const SCHEDULER_SHUTDOWN_MS = 15_000;

/** How long an exit waits for finished answers to leave before closing the sockets. */
const FLUSH_MS = 500;

/** --decode-log-interval's default, in decode steps (S:python/sglang/srt/server_args.py:1627-1631). */
const DEFAULT_DECODE_LOG_INTERVAL = 40;

/** An idle scheduler republishes its gauges at least this often (metrics_reporter.py:1154-1175). */
const IDLE_METRICS_MS = 30_000;

/** How often a weight update that waits for the requests in flight looks again. */
const UPDATE_LOCK_POLL_MS = 20;

/**
 * Routes marked @auth_level(AuthLevel.ADMIN_OPTIONAL) that the double serves
 * (S:python/sglang/srt/entrypoints/http_server.py:1235-1236, 1482-1483,
 * 1494-1495, 1506-1507, 1685-1686, 1698-1699).
 */
const ADMIN_OPTIONAL = new Set([
  '/update_weights_from_disk',
  '/release_memory_occupation',
  '/resume_memory_occupation',
  '/weights_checker',
  '/pause_generation',
  '/continue_generation',
]);

export interface FakeSglangOptions {
  model: string;
  servedName: string;
  host: string;
  port: number;
  tp: number;
  pp: number;
  metrics: boolean;
  nnodes: number;
  nodeRank: number;
  apiKey?: string;
  /** --admin-api-key: the key of the ADMIN_OPTIONAL routes (S:python/sglang/srt/utils/auth.py:123-138). */
  adminApiKey?: string;
  embedding: boolean;
  priorityScheduling: boolean;
  skipWarmup: boolean;
  /** --enable-memory-saver (fake-sglang-memory-saver.ts). */
  memorySaver: boolean;
  /** --enable-weights-cpu-backup: a release keeps the weights in host RAM (fake-sglang-memory-saver.ts). */
  weightsCpuBackup: boolean;
  /** --decode-log-interval: decode steps between two refreshes of the scheduler's gauges. */
  decodeLogInterval: number;
  knobs: SimKnobs;
}

const SPECS: readonly ArgSpec[] = [
  // S:python/sglang/srt/server_args.py:492-499 (required), 1277-1278, 1369-1373.
  { names: ['--model-path', '--model'], kind: 'string' },
  { names: ['--host'], kind: 'string' },
  { names: ['--port'], kind: 'int' },
  { names: ['--served-model-name'], kind: 'string' },
  // S:python/sglang/srt/server_args.py:1010-1017, 1026.
  { names: ['--tp-size', '--tensor-parallel-size'], kind: 'int' },
  { names: ['--pp-size', '--pipeline-parallel-size'], kind: 'int' },
  // S:python/sglang/srt/server_args.py:1547-1549.
  { names: ['--enable-metrics'], kind: 'flag' },
  // S:python/sglang/srt/server_args.py:995-1009.
  { names: ['--nnodes'], kind: 'int' },
  { names: ['--node-rank'], kind: 'int' },
  { names: ['--dist-init-addr', '--nccl-init-addr'], kind: 'string' },
  { names: ['--api-key'], kind: 'string' },
  // S:python/sglang/srt/server_args.py (shared/fixtures/engines/sglang-server-flags.txt:72); utils/auth.py:123-138.
  { names: ['--admin-api-key'], kind: 'string' },
  { names: ['--is-embedding'], kind: 'flag' },
  { names: ['--enable-priority-scheduling'], kind: 'flag' },
  // S:python/sglang/srt/server_args.py:1319.
  { names: ['--skip-server-warmup'], kind: 'flag' },
  // S:python/sglang/srt/server_args.py:3478-3482, 3483-3487.
  { names: ['--enable-memory-saver'], kind: 'flag' },
  { names: ['--enable-weights-cpu-backup'], kind: 'flag' },
  // S:python/sglang/srt/server_args.py:1627-1631 (default 40).
  { names: ['--decode-log-interval'], kind: 'int' },
  ...SIM_KNOB_SPECS,
];

/** SGLang's options from its argv (without `serve`); throws ArgparseError as its parser would refuse it. */
export function parseFakeSglangArgv(argv: readonly string[]): FakeSglangOptions {
  const p = parseArgv(argv, SPECS, { maxPositionals: 0 });
  const knobs = simKnobs(p);
  const model = p.values.get('--model-path') as string | undefined;
  if (!model) throw new ArgparseError('the following arguments are required: --model-path/--model');
  const int = (name: string, dflt: number) => (p.values.get(name) as number | undefined) ?? dflt;
  return {
    model,
    servedName: (p.values.get('--served-model-name') as string | undefined) ?? model,
    host: (p.values.get('--host') as string | undefined) ?? DEFAULT_HOST,
    port: int('--port', DEFAULT_PORT),
    tp: int('--tp-size', 1),
    pp: int('--pp-size', 1),
    metrics: p.values.get('--enable-metrics') === true,
    nnodes: int('--nnodes', 1),
    nodeRank: int('--node-rank', 0),
    apiKey: p.values.get('--api-key') as string | undefined,
    adminApiKey: p.values.get('--admin-api-key') as string | undefined,
    embedding: p.values.get('--is-embedding') === true,
    priorityScheduling: p.values.get('--enable-priority-scheduling') === true,
    skipWarmup: p.values.get('--skip-server-warmup') === true,
    memorySaver: p.values.get('--enable-memory-saver') === true,
    weightsCpuBackup: p.values.get('--enable-weights-cpu-backup') === true,
    decodeLogInterval: decodeLogInterval(p.values.get('--decode-log-interval')),
    knobs,
  };
}

/** The decode log interval given; SGLang divides by it, so 0 or less is refused here (the double's check, not argparse's). */
function decodeLogInterval(v: unknown): number {
  if (v === undefined) return DEFAULT_DECODE_LOG_INTERVAL;
  if (typeof v !== 'number' || v < 1) throw new ArgparseError(`argument --decode-log-interval: must be at least 1, got '${String(v)}'`);
  return v;
}

/**
 * The three levels of SGLang's auth middleware, for a request to `path`
 * (S:python/sglang/srt/utils/auth.py:74-146; mounted only when a key is set,
 * http_server.py:2561-2574): /health* and /metrics* are always open (:100);
 * an ADMIN_OPTIONAL route takes the admin key when one is set, and then
 * never the API key, else the API key, else anyone (:123-138); any other
 * route takes the API key when one is set, else anyone, even with an admin
 * key set (:140-146). OPTIONS is always let through (:97-98).
 */
export function sglangAuthorized(o: Pick<FakeSglangOptions, 'apiKey' | 'adminApiKey'>, method: string, path: string, req: IncomingMessage): boolean {
  if (method === 'OPTIONS' || path.startsWith('/health') || path.startsWith('/metrics')) return true;
  if (ADMIN_OPTIONAL.has(path)) {
    if (o.adminApiKey) return bearerOk(req, [o.adminApiKey]);
    if (o.apiKey) return bearerOk(req, [o.apiKey]);
    return true;
  }
  return o.apiKey ? bearerOk(req, [o.apiKey]) : true;
}

/**
 * loading: no HTTP until the schedulers are ready; starting: HTTP up, warmup
 * not done (/health 503); up; draining: SIGTERM seen; exiting.
 * S:python/sglang/srt/managers/tokenizer_manager.py:3576-3579 (Up/Starting/UnHealthy).
 */
type Phase = 'loading' | 'starting' | 'up' | 'draining' | 'exiting';

const NEXT: Record<Phase, readonly Phase[]> = {
  loading: ['starting', 'up', 'exiting'],
  starting: ['up', 'draining', 'exiting'],
  up: ['draining', 'exiting'],
  draining: ['exiting'],
  exiting: [],
};

const envFalse = (v: string | undefined) => v !== undefined && ['0', 'false', 'no', 'off'].includes(v.toLowerCase());

/** Runs the double until it exits; resolves with its exit status (a failure SIGKILLs itself instead, as SGLang does). */
export function runFakeSglang(o: FakeSglangOptions, env: NodeJS.ProcessEnv = process.env): Promise<number> {
  return new Promise<number>((resolveExit) => {
    const k = o.knobs;
    const startedS = Math.floor(Date.now() / 1000);
    const timers: NodeJS.Timeout[] = [];
    let phase: Phase = 'loading';
    // S:python/sglang/srt/managers/tokenizer_manager.py:3576-3579: set by a /health_generate that timed out.
    let unhealthy = false;
    let hung = false;
    let server: Server | undefined;
    let sigtermHandled = false;
    // The tokenizer's last_receive_tstamp: when any output last arrived.
    let lastOutputAt = 0;
    const healthTimeoutMs = Number(env.SGLANG_HEALTH_CHECK_TIMEOUT ?? DEFAULT_HEALTH_CHECK_TIMEOUT_S) * 1000;
    const counters = { prompt: { true: 0, false: 0 }, generation: { true: 0, false: 0 }, requests: 0 };
    const realtime = { prefill_compute: 0, prefill_cache: 0, decode: 0 };
    // The name the tokenizer serves under: a weight update from disk replaces it by its model_path
    // (S:python/sglang/srt/managers/tokenizer_manager.py:2099-2103).
    let servedName = o.servedName;
    let modelPath = o.model;
    const radix = new FakeRadixCache();
    /** Prompt tokens of a request served from the prefix cache, set when it is submitted. */
    const cacheHits = new WeakMap<SchedRequest, number>();
    /** The prompt of a request, inserted into the cache at its prefill. */
    const prompts = new WeakMap<SchedRequest, string[]>();

    /**
     * The scheduler's gauges as /metrics last published them (self.stats,
     * written by metrics_collector.log_stats). They are not read live: they
     * are written at each prefill batch, with the running batch as it was
     * before the new requests joined it (metrics_reporter.py:666-679, from
     * PrefillStats.from_adder(adder, running_batch.reqs), scheduler.py:3418-3421);
     * every --decode-log-interval decode steps (metrics_reporter.py:750-764,
     * 886-897; the step count, batch_result_processor.py:909-911); and when
     * the scheduler idles with a gauge that disagrees with its empty batch,
     * or 30 s after the last write (metrics_reporter.py:1154-1210,
     * scheduler.py:4069). So a request that decodes fewer steps than the
     * interval, alone, never shows in num_running_reqs.
     */
    const gauges = { running: [] as SchedRequest[], waiting: [] as SchedRequest[], at: 0 };
    /** Requests past their prefill: the decode batch (running_batch.reqs). */
    const decoding = new Set<SchedRequest>();
    /** forward_ct_decode: decode steps of the batch since start. */
    let decodeSteps = 0;
    const publishGauges = (running: SchedRequest[]) => {
      gauges.running = running;
      gauges.waiting = scheduler.snapshot().waiting;
      gauges.at = Date.now();
    };

    const later = (ms: number, fn: () => void) => timers.push(setTimeout(fn, ms));
    timers.push(setInterval(() => {}, 1 << 30));
    // An idle scheduler writes its gauges at least every 30 s (metrics_reporter.py:1169-1175).
    timers.push(
      setInterval(() => {
        if (scheduler.running(false) === 0 && Date.now() - gauges.at >= IDLE_METRICS_MS) publishGauges([]);
      }, IDLE_METRICS_MS),
    );

    const setPhase = (next: Phase, why: string) => {
      if (!NEXT[phase].includes(next)) throw new Error(`fake-sglang: no transition ${phase} -> ${next}`);
      sglangLog('INFO', `[fake-sglang] phase ${phase} -> ${next}: ${why}`);
      phase = next;
    };

    const scheduler = new FakeBatchScheduler(
      { maxRunning: k.maxRunning, tokenLatencyMs: k.tokenLatencyMs, embedLatencyMs: k.embedLatencyMs },
      {
        prefill: (r) => {
          lastOutputAt = Date.now();
          // On each prefill batch, the computed and the cached prompt tokens apart
          // (S:python/sglang/srt/managers/scheduler_components/metrics_reporter.py:628-636). The
          // scheduler counts every request it runs, its own health checks too: their
          // log_metrics=False reaches only the tokenizer's counters (http_server.py:689-697;
          // tokenizer_manager.py:2496).
          const hit = cacheHits.get(r) ?? 0;
          realtime.prefill_compute += r.promptTokens - hit;
          realtime.prefill_cache += hit;
          const words = prompts.get(r);
          if (words) radix.insert(words);
          publishGauges([...decoding]);
          if (!r.pooling && r.maxTokens > 1) decoding.add(r);
        },
        token: (r, i) => {
          lastOutputAt = Date.now();
          // The first token comes out of the prefill; every later one is a decode step
          // (metrics_reporter.py:726-733).
          if (i === 0) return;
          realtime.decode++;
          // One step of the batch per step of its oldest request: each request steps on its own timer here.
          if (decoding.values().next().value !== r) return;
          decodeSteps++;
          if (decodeSteps % o.decodeLogInterval === 0) publishGauges([...decoding]);
        },
        // Once per finished request, by its whole count
        // (S:python/sglang/srt/observability/metrics_collector.py:1740-1757; tokenizer_manager.py:2908).
        finish: (r) => {
          decoding.delete(r);
          if (r.internal) return;
          const s = r.streaming === true ? 'true' : 'false';
          counters.prompt[s] += r.promptTokens;
          counters.generation[s] += r.maxTokens;
          counters.requests++;
        },
        changed: () => {
          // A request dropped or aborted leaves the batch; an idle scheduler corrects a stale gauge at once.
          const { running } = scheduler.snapshot();
          for (const r of decoding) if (!running.includes(r)) decoding.delete(r);
          if (running.length === 0 && gauges.running.length > 0) publishGauges([]);
        },
      },
    );

    /** Ends the server; `killSelf`: by SIGKILL to this process, as kill_process_tree(include_parent=True) does, not by an exit code. */
    const exit = async (code: number, why: string, killSelf = false) => {
      if (phase === 'exiting') return;
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
      updateLock: () => updateLock(),
      reloaded: (path) => {
        servedName = path;
        modelPath = path;
        // A weight update flushes the cache (flush_cache defaults to true: io_struct.py:1762-1763; weight_updater.py:103-108).
        radix.reset();
      },
      flushCache: () => radix.reset(),
    });

    // tp × pp schedulers on this node, and the detokenizer on rank 0 only
    // (ENGINES.md (d): ranks ≥ 1 run only schedulers plus the dummy health server).
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
        const dead = children.exits.find((e) => e.code !== 0);
        if (dead && phase !== 'exiting') {
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
      if (phase === 'draining' || phase === 'exiting') return;
      sglangLog('INFO', `Received ${sig}; gracefully exiting`);
      setPhase('draining', sig);
      for (;;) {
        if (env.SGL_FORCE_SHUTDOWN !== undefined) {
          sglangLog('INFO', 'SGL_FORCE_SHUTDOWN is set; exiting without waiting for requests');
          break;
        }
        await sleep(k.drainPollMs);
        if (unhealthy) {
          // A /health_generate that timed out set UnHealthy (http_server.py:723): no drain at all.
          sglangLog('ERROR', 'Signal SIGTERM received while health check failed. Force exiting.');
          break;
        }
        const remaining = scheduler.running(false) + scheduler.waiting(false) + heldCount();
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

    /**
     * Paused by /pause_generation: new requests (health checks too) wait in
     * the tokenizer, before they reach the scheduler, until
     * /continue_generation (S:python/sglang/srt/managers/tokenizer_manager.py:804-805, 2010-2029).
     */
    let generationPaused = false;
    /**
     * A weight update holds the model_update_lock's writer side: new requests
     * wait for its reader side (tokenizer_manager.py:807, 2045-2052).
     */
    let updatingWeights = false;
    /**
     * Requests waiting in the tokenizer, each in rid_to_state. One whose
     * client went away leaves it when its handler is cancelled: a stream's,
     * which Starlette cancels on disconnect (the except at :822-831 discards
     * its state); a health check's, popped by its handler. A plain request's
     * handler is not cancelled, so it stays *(inferred)*.
     */
    interface Held {
      go: () => void;
      req: SchedRequest;
      dropped: boolean;
    }
    const held: Held[] = [];
    const heldCount = () => held.filter((h) => !(h.dropped && (h.req.streaming === true || h.req.internal === true))).length;
    const releaseHeld = () => {
      if (generationPaused || updatingWeights) return;
      for (const h of held.splice(0)) h.go();
    };
    /** tokenizer_manager.py:2045-2052: no lock while paused; otherwise new requests wait while the running ones finish. */
    const updateLock = async (): Promise<() => void> => {
      if (generationPaused) return () => {};
      updatingWeights = true;
      while (scheduler.running(false) + scheduler.waiting(false) > 0) await sleep(UPDATE_LOCK_POLL_MS);
      return () => {
        updatingWeights = false;
        releaseHeld();
      };
    };
    const toScheduler = (req: SchedRequest): (() => void) => {
      // fake-sglang-memory-saver.ts: nothing stops a forward pass on released memory (inferred).
      if (memory.released) {
        killTree('Scheduler hit an exception: RuntimeError: CUDA error: an illegal memory access was encountered (a forward pass on memory released by release_memory_occupation)');
        return () => {};
      }
      return scheduler.submit(req);
    };
    const submit = (req: SchedRequest) => {
      installSigterm();
      if (!generationPaused && !updatingWeights) return toScheduler(req);
      let drop: (() => void) | undefined;
      const h: Held = {
        req,
        dropped: false,
        go: () => {
          if (!h.dropped) drop = toScheduler(req);
        },
      };
      held.push(h);
      return () => {
        h.dropped = true;
        drop?.();
      };
    };

    /**
     * POST /pause_generation `{"mode": "abort"|"retract"|"in_place"}` (default
     * abort) and /continue_generation, ADMIN_OPTIONAL, each 200 with a message
     * (S:python/sglang/srt/entrypoints/http_server.py:1685-1708; io_struct.py:1700-1719).
     * abort ends every request in flight (tokenizer_manager.py:2010-2022);
     * retract and in_place stop the scheduler's batches instead (scheduler.py:4584-4586, 4673-4693).
     */
    const pauseRoute = async (req: IncomingMessage, res: ServerResponse, pause: boolean) => {
      const body = await readBodyObject(req);
      if (typeof body === 'string') return sendJson(res, 400, errorBody(body, 'Bad Request', 400));
      if (!pause) {
        generationPaused = false;
        scheduler.resume();
        releaseHeld();
        sendJson(res, 200, { message: 'Generation continued successfully.', status: 'ok' });
        return;
      }
      const mode = body.mode ?? 'abort';
      if (mode !== 'abort' && mode !== 'retract' && mode !== 'in_place') {
        return sendJson(res, 400, errorBody(`1 validation error: {'type': 'literal_error', 'loc': ('body', 'mode'), 'msg': "Input should be 'abort', 'retract' or 'in_place'"}`, 'Bad Request', 400));
      }
      generationPaused = true;
      if (mode === 'abort') scheduler.abortAll('Abort all requests: generation paused.');
      else scheduler.pause();
      sendJson(res, 200, { message: 'Generation paused successfully.', status: 'ok' });
    };
    const ctx: RouteContext = {
      // SGLang takes any model name (the OpenAI routes never compare it); the double
      // takes the names it has served under, so a request is not refused after a reload.
      get servedNames() {
        return servedName === o.servedName ? [o.servedName] : [o.servedName, servedName];
      },
      submit,
      defaultMaxTokens: k.maxTokens,
      weightsLost: () => memory.weightsLost,
    };

    sglangLog('INFO', `server_args=ServerArgs(model_path='${o.model}', host='${o.host}', port=${o.port}, tp_size=${o.tp}, pp_size=${o.pp}, nnodes=${o.nnodes}, node_rank=${o.nodeRank}) (llmgw fake-sglang ${DEFAULT_SGLANG_VERSION}, pid ${process.pid})`);

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
        hung = true;
        scheduler.stall();
      });
    }

    /**
     * GET /health_generate: a 1-token generation, then the first look after
     * 1 s; 200 as soon as any output arrived since it started (and the
     * status Up again), 503 (and UnHealthy) after SGLANG_HEALTH_CHECK_TIMEOUT
     * without any (S:python/sglang/srt/entrypoints/http_server.py:654-725).
     * A client that gives up does not end it: a plain FastAPI handler is not
     * cancelled on disconnect, so a check a paused server holds still sets
     * UnHealthy at its own 20 s, after which a SIGTERM skips the drain
     * (tokenizer_manager.py:3123-3130; review engine-fidelity-2 N3).
     */
    const healthGenerate = async (res: ServerResponse) => {
      const tic = Date.now();
      const drop = submit({ promptTokens: 1, maxTokens: 1, finishReason: 'length', pooling: o.embedding, internal: true });
      await sleep(HEALTH_FIRST_LOOK_MS);
      for (;;) {
        if (phase === 'exiting') return;
        if (lastOutputAt > tic) {
          drop();
          unhealthy = false;
          if (!res.destroyed) res.writeHead(200, { 'content-length': '0' }).end();
          return;
        }
        if (Date.now() - tic > healthTimeoutMs) {
          unhealthy = true;
          drop();
          sglangLog('ERROR', `Health check failed. Server couldn't get a response from detokenizer for last ${healthTimeoutMs / 1000} seconds.`);
          if (!res.destroyed) res.writeHead(503, { 'content-length': '0' }).end();
          return;
        }
        await sleep(HEALTH_POLL_MS);
      }
    };

    const handle = (req: IncomingMessage, res: ServerResponse) => {
      if (hung) return;
      const path = (req.url ?? '/').split('?')[0] as string;
      const method = req.method ?? 'GET';
      // S:python/sglang/srt/utils/auth.py:187-198: a refusal is 401 {"error": "Unauthorized"}; /ping is not exempt.
      if (!sglangAuthorized(o, method, path, req)) {
        sendJson(res, 401, { error: 'Unauthorized' });
        return;
      }
      if (path === '/ping') {
        res.writeHead(200, { 'content-length': '0' }).end(); // S:python/sglang/srt/entrypoints/http_server.py:2023-2026
        return;
      }
      if (method === 'GET' && (path === '/health' || path === '/health_generate')) {
        // 503 while shutting down and while Starting (http_server.py:664-669).
        if (phase !== 'up') {
          res.writeHead(503, { 'content-length': '0' }).end();
          return;
        }
        // SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION defaults to true (S:python/sglang/srt/environ.py:319).
        if (path === '/health' && envFalse(env.SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION)) {
          res.writeHead(200, { 'content-length': '0' }).end();
          return;
        }
        void healthGenerate(res);
        return;
      }
      if (memory.handle(req, res, path, method)) return;
      if (method === 'POST' && (path === '/pause_generation' || path === '/continue_generation')) {
        void pauseRoute(req, res, path === '/pause_generation');
        return;
      }
      if (method === 'GET' && path === '/metrics') {
        // Mounted only with --enable-metrics (http_server.py:285-287).
        if (!o.metrics) sendJson(res, 404, { detail: 'Not Found' });
        else res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' }).end(metricsText());
        return;
      }
      // The information routes answer from the tokenizer's own state, without a
      // generation, so a paused or released server answers them too (N3).
      if (method === 'GET' && path === '/v1/models') {
        // id and root = the tokenizer's served_model_name (S:python/sglang/srt/entrypoints/http_server.py:1843-1872).
        sendJson(res, 200, { object: 'list', data: [{ id: servedName, object: 'model', created: startedS, owned_by: 'sglang', root: servedName, max_model_len: 4096 }] });
        return;
      }
      if (method === 'GET' && path === '/model_info') {
        // S:python/sglang/srt/entrypoints/http_server.py:738-773 (a subset of its fields).
        sendJson(res, 200, { model_path: modelPath, served_model_name: servedName, tokenizer_path: o.model, is_generation: !o.embedding, weight_version: 'default' });
        return;
      }
      if (method === 'GET' && path === '/server_info') {
        // The launch arguments and the schedulers' internal state, asked of the scheduler's
        // control path, which a pause does not stop (http_server.py:796-826; scheduler.py:1725-1729).
        sendJson(res, 200, { model_path: o.model, served_model_name: o.servedName, tp_size: o.tp, pp_size: o.pp, enable_memory_saver: o.memorySaver, enable_weights_cpu_backup: o.weightsCpuBackup, decode_log_interval: o.decodeLogInterval, internal_states: [{ last_gen_throughput: 0 }], version: DEFAULT_SGLANG_VERSION });
        return;
      }
      if (method === 'GET' && path === '/v1/loads') {
        sendJson(res, 200, loads());
        return;
      }
      const generation = method === 'POST' && (path === '/v1/chat/completions' || path === '/v1/completions') && !o.embedding;
      const embedding = method === 'POST' && path === '/v1/embeddings' && o.embedding;
      if (!generation && !embedding) {
        sendJson(res, 404, { detail: 'Not Found' });
        return;
      }
      // gracefully_exit is read only by /health: new requests are still taken while draining
      // (review: "new API requests are not refused during the drain", inferred from grep of http_server.py).
      if (phase === 'exiting') {
        sendJson(res, 503, errorBody('The server is not ready.', 'ServiceUnavailableError', 503), true);
        return;
      }
      if (embedding) void serveEmbedding(req, res, ctx);
      else void generate(req, res, path === '/v1/chat/completions' ? 'chat' : 'text');
    };

    /**
     * A completion, its prompt matched against the prefix cache first: the
     * body is read here and handed on, and the request this body submits
     * carries its cache hit to the prefill (fake-radix-cache.ts).
     */
    const generate = async (req: IncomingMessage, res: ServerResponse, kind: 'chat' | 'text') => {
      let text: string;
      try {
        text = await readBody(req);
      } catch {
        return;
      }
      let words: string[] = [];
      try {
        const body = JSON.parse(text) as unknown;
        if (body && typeof body === 'object' && !Array.isArray(body)) words = promptWords(body as Record<string, unknown>);
      } catch {
        // serveGeneration answers the 400.
      }
      const replay = Object.assign(Readable.from([Buffer.from(text)]), { headers: req.headers, method: req.method, url: req.url }) as unknown as IncomingMessage;
      const own: RouteContext = {
        get servedNames() {
          return ctx.servedNames;
        },
        defaultMaxTokens: ctx.defaultMaxTokens,
        weightsLost: ctx.weightsLost,
        submit: (r) => {
          cacheHits.set(r, radix.match(words));
          prompts.set(r, words);
          return submit(r);
        },
      };
      await serveGeneration(replay, res, kind, own);
    };

    /**
     * GET /v1/loads: one entry per DP rank (one here) with running and waiting
     * counts (S:python/sglang/srt/entrypoints/v1_loads.py:61-93). The field
     * set beyond those two follows the shape public clients read; the double
     * cannot vouch for each.
     */
    const loads = () => {
      const running = scheduler.running();
      const waiting = scheduler.waiting();
      const one = { dp_rank: 0, num_running_reqs: running, num_waiting_reqs: waiting, num_total_reqs: running + waiting, num_used_tokens: 0, max_total_num_tokens: 1_000_000, token_usage: 0, gen_throughput: 0, cache_hit_rate: 0, utilization: 0 };
      return { timestamp: new Date().toISOString(), version: DEFAULT_SGLANG_VERSION, dp_rank_count: 1, loads: [one], aggregate: { total_running_reqs: running, total_waiting_reqs: waiting, total_reqs: running + waiting } };
    };

    /**
     * Labels model_name, engine_type, tp_rank, pp_rank, moe_ep_rank
     * (S:python/sglang/srt/observability/metrics_collector.py:1080-1108); each
     * PP stage exports its own running/queue series. With priority scheduling
     * the gauges are written under priority="" (the total) and once per
     * priority (metrics_collector.py:1131-1143).
     */
    const metricsText = (): string => {
      const base = (pp: number) => `model_name="${o.servedName}",engine_type="unified",tp_rank="0",pp_rank="${pp}",moe_ep_rank="0"`;
      const head = (type: string, name: string, help: string) => `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n`;
      const { running, waiting } = gauges;
      const gauge = (name: string, help: string, reqs: SchedRequest[]) => {
        const counted = reqs.filter((r) => !r.internal);
        let text = head('gauge', name, help);
        for (let pp = 0; pp < o.pp; pp++) {
          if (!o.priorityScheduling) {
            text += `${name}{${base(pp)}} ${counted.length.toFixed(1)}\n`;
            continue;
          }
          text += `${name}{${base(pp)},priority=""} ${counted.length.toFixed(1)}\n`;
          const byPriority = new Map<number, number>();
          for (const r of counted) byPriority.set(r.priority ?? 0, (byPriority.get(r.priority ?? 0) ?? 0) + 1);
          for (const [p, n] of byPriority) text += `${name}{${base(pp)},priority="${p}"} ${n.toFixed(1)}\n`;
        }
        return text;
      };
      const counter = (name: string, help: string, v: { true: number; false: number }) =>
        head('counter', name, help) +
        `${name}{${base(0)},is_streaming="false"} ${v.false.toFixed(1)}\n${name}{${base(0)},is_streaming="true"} ${v.true.toFixed(1)}\n`;
      return (
        gauge('sglang:num_running_reqs', 'The number of running requests.', running) +
        gauge('sglang:num_queue_reqs', 'The number of requests in the waiting queue.', waiting) +
        head('gauge', 'sglang:token_usage', 'The token usage.') +
        `sglang:token_usage{${base(0)}} ${Math.min(1, running.length * 0.01).toFixed(2)}\n` +
        counter('sglang:prompt_tokens_total', 'Number of prefill tokens processed.', counters.prompt) +
        counter('sglang:generation_tokens_total', 'Number of generation tokens processed.', counters.generation) +
        head('counter', 'sglang:num_requests_total', 'Number of requests processed.') +
        `sglang:num_requests_total{${base(0)}} ${counters.requests.toFixed(1)}\n` +
        head('counter', 'sglang:realtime_tokens_total', 'Total number of tokens processed (updated on each log interval). mode: prefill_compute, prefill_cache, decode.') +
        // A mode's series exists from its first increment: a zero delta is skipped (metrics_collector.py:1243-1257).
        (['prefill_compute', 'prefill_cache', 'decode'] as const)
          .filter((m) => realtime[m] > 0)
          .map((m) => `sglang:realtime_tokens_total{${base(0)},mode="${m}"} ${realtime[m].toFixed(1)}\n`)
          .join('')
      );
    };

    /**
     * Ranks ≥ 1: no API, but once the schedulers are ready a dummy server on
     * --host:--port answers /health, /health_generate and /ping with 200,
     * and /metrics with --enable-metrics; a taken port is logged and not
     * fatal (S:python/sglang/srt/entrypoints/engine.py:1150-1169;
     * S:python/sglang/srt/utils/common.py:3273-3330).
     */
    const startDummyServer = () => {
      const dummy = createServer((req, res) => {
        const path = (req.url ?? '/').split('?')[0] as string;
        if (path === '/health' || path === '/health_generate' || path === '/ping') res.writeHead(200, { 'content-length': '0' }).end();
        else if (path === '/metrics' && o.metrics) res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' }).end(metricsText());
        else sendJson(res, 404, { detail: 'Not Found' });
      });
      dummy.on('error', (err) => sglangLog('ERROR', `Failed to start the dummy health server on ${o.host}:${o.port}: ${err.message}`));
      dummy.listen(o.port, o.host, () => sglangLog('INFO', `Dummy health server for node rank ${o.nodeRank} on http://${o.host}:${o.port}`));
      server = dummy;
    };

    // No HTTP until every scheduler is ready (S:python/sglang/srt/entrypoints/engine.py:1222-1243).
    sglangLog('INFO', `Load weight begin. (model ${o.model})`);
    later(k.loadTimeMs, () => {
      if (phase !== 'loading') return;
      sglangLog('INFO', 'Load weight end.');
      memory.loaded();
      if (o.nodeRank >= 1) {
        setPhase('up', 'schedulers ready (worker rank)');
        startDummyServer();
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
            if (phase !== 'starting') return;
            setPhase('up', 'warmup done');
            sglangLog('INFO', 'The server is fired up and ready to roll!');
          },
        });
      });
    });
  });
}

async function main(): Promise<void> {
  let argv = process.argv.slice(2);
  // `sglang serve …` (S:python/pyproject.toml:201-203) or `python3 -m sglang.launch_server …`.
  const viaCli = argv[0] === 'serve';
  if (viaCli) argv = argv.slice(1);
  const prog = viaCli ? 'sglang serve' : 'launch_server.py';
  let opts: FakeSglangOptions;
  try {
    opts = parseFakeSglangArgv(argv);
  } catch (err) {
    if (!(err instanceof ArgparseError)) throw err;
    printArgparseError(`${prog} [-h] --model-path MODEL_PATH [--host HOST] [--port PORT] [options]`, prog, err.message);
    process.exit(ARGPARSE_EXIT);
  }
  process.exit(await runFakeSglang(opts));
}

if (process.argv[1] && fileURLToPath(import.meta.url) === resolve(process.argv[1])) await main();
