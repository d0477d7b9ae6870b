import { startSimRendezvous } from './sim-rendezvous.js';
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { type IncomingMessage, type Server, type ServerResponse, createServer } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  type CompletionKind,
  completionBody,
  completionChunk,
  countPromptTokens,
  errorBody,
  modelList,
  simToken,
} from './openai-responses.js';
import { droppedLogLines, vllmLog, writeEngineOutput } from './engine-log.js';
import type { SimEngineOptions } from './sim-engine-options.js';
import { readBody, sendJson } from './sim-http.js';

/** How often a stalled request looks again whether its client went away. */
const STALL_POLL_MS = 100;

/**
 * The escaping grandchild's own limit: it exists to outlive a group kill, so
 * nothing but a cgroup stop or its pid reaches it; a test that fails before
 * killing it must not leave it running for ever.
 */
const ESCAPED_CHILD_LIFETIME_MS = 30 * 60_000;

/**
 * Runs a simulated inference engine until it is told to stop or a fault
 * switch ends it; resolves with the exit status the process should have.
 */
export function runSimEngine(opts: SimEngineOptions): Promise<number> {
  return new Promise<number>((resolveExit) => {
    const startedS = Math.floor(Date.now() / 1000);
    const timers: NodeJS.Timeout[] = [];
    let running = 0;
    let generatedTokens = 0;
    let promptTokens = 0;
    let hung = false;
    let stalled = false;
    let draining = false;
    let finished = false;
    let server: Server | undefined;
    let child: ChildProcess | undefined;

    const finish = (code: number) => {
      if (finished) return;
      finished = true;
      for (const t of timers) clearTimeout(t);
      process.off('SIGTERM', onTerm);
      process.off('SIGINT', onTerm);
      // A real engine takes its workers down with it when it exits on its own.
      if (child?.exitCode === null) child.kill('SIGKILL');
      server?.closeAllConnections();
      server?.close();
      resolveExit(code);
    };

    const maybeFinishDrain = () => {
      if (draining && running === 0) {
        vllmLog('INFO', 'launcher.py:80', 'Shutting down FastAPI HTTP server.');
        finish(0);
      }
    };

    const onTerm = (sig: NodeJS.Signals) => {
      if (opts.ignoreSigterm) {
        vllmLog('WARNING', 'api_server.py:900', `received ${sig}; ignoring it (--ignore-sigterm)`);
        return;
      }
      if (draining) return;
      draining = true;
      vllmLog('INFO', 'launcher.py:74', `received ${sig}; finishing ${running} in-flight request(s), accepting no more`);
      server?.close();
      server?.closeIdleConnections();
      maybeFinishDrain();
    };
    process.on('SIGTERM', onTerm);
    process.on('SIGINT', onTerm);

    // An engine that is loading forever or a worker rank has no other handle:
    // without this one Node would find nothing left to do and exit (13).
    const keepAlive = setInterval(() => {}, 1 << 30);
    timers.push(keepAlive);

    const later = (ms: number, fn: () => void) => {
      const t = setTimeout(fn, ms);
      timers.push(t);
    };

    vllmLog('INFO', 'api_server.py:1000', `vLLM API server version 0.0.0-sim (llmgw sim engine), pid ${process.pid}`);
    vllmLog('INFO', 'api_server.py:1001', `args: model=${opts.model} host=${opts.host} port=${opts.port} worker=${opts.worker}`);

    if (opts.spawnChild) {
      // Same process group (not detached): what a stop must reach through the group.
      // It says it is ready only once its SIGTERM disposition is set, so a
      // test that waits for the line knows which signal will end it.
      const ignore = opts.ignoreSigterm ? "process.on('SIGTERM',()=>{});" : '';
      const script = `${ignore}console.log('INFO [multiproc_worker_utils.py:215] Worker process ' + process.pid + ' ready');setInterval(()=>{},1<<30)`;
      child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'inherit', 'inherit'] });
      child.on('error', () => {});
      if (opts.fragileWorker) {
        const pid = child.pid;
        child.on('exit', (code, sig) => {
          // Its end on our own way out (finish kills it) is no failure.
          if (finished) return;
          vllmLog('ERROR', 'multiproc_executor.py:298', `Worker proc ${pid} died unexpectedly (${sig ?? `exit ${code}`}), shutting down executor; aborting ${running} in-flight request(s)`);
          finish(1);
        });
      }
      child.unref();
    }

    if (opts.spawnEscapingChild) {
      // detached: setsid(), a session and process group of its own. It is
      // not remembered in `child`: the engine exiting does not take it down,
      // which is the leak this switch reproduces.
      const script = `console.log('INFO [multiproc_worker_utils.py:216] Escaped worker process ' + process.pid + ' ready (own session, pgid ' + process.pid + ')');setTimeout(()=>{},${ESCAPED_CHILD_LIFETIME_MS})`;
      const escaped = spawn(process.execPath, ['-e', script], { detached: true, stdio: ['ignore', 'inherit', 'inherit'] });
      escaped.on('error', () => {});
      escaped.unref();
    }

    if (opts.stallAfterMs !== undefined) {
      later(opts.stallAfterMs, () => {
        stalled = true;
        vllmLog('WARNING', 'core.py:1190', 'EngineCore step made no progress; requests running, no tokens produced (--stall-after)');
      });
    }

    if (opts.failAfterMs !== undefined) {
      later(opts.failAfterMs, () => {
        vllmLog('ERROR', 'engine.py:165', 'RuntimeError: CUDA error: an illegal memory access was encountered');
        vllmLog('ERROR', 'engine.py:166', `Engine core died unexpectedly; exiting with ${opts.exitCode}`);
        finish(opts.exitCode);
      });
    }

    if (opts.hangAfterMs !== undefined) {
      later(opts.hangAfterMs, () => {
        hung = true;
        // Defined at V:vllm/distributed/device_communicators/shm_broadcast.py:103-107, logged at INFO from acquire_write (:679-682).
        vllmLog('INFO', 'shm_broadcast.py:679', 'No available shared memory broadcast block found in 60 seconds.');
      });
    }

    if (opts.logRate !== undefined && opts.logRate > 0) {
      const rate = opts.logRate;
      // Ticks of at least 20 ms, several lines per tick at high rates.
      const tickMs = Math.max(20, 1000 / rate);
      let owed = 0;
      let n = 0;
      const tick = () => {
        owed += (rate * tickMs) / 1000;
        let text = '';
        for (; owed >= 1; owed--) {
          n++;
          text += `INFO [metrics.py:455] Avg prompt throughput: 0.0 tokens/s, Running: ${running} reqs, Waiting: 0 reqs, line ${n}\n`;
        }
        if (text) writeEngineOutput(1, text);
        const t = setTimeout(tick, tickMs);
        timers.push(t);
      };
      tick();
    }

    if (opts.rendezvous !== undefined) {
      const rdv = startSimRendezvous({
        addr: opts.rendezvous,
        leader: !opts.worker,
        log: (level, where, text) => vllmLog(level, where, text),
        // The leader makes no progress from here on, /health 200; a worker rank waits in the collective and
        // never exits (sim-rendezvous.ts; V:vllm/entrypoints/cli/serve.py:207-223).
        onPeerLost: () => {
          if (opts.worker) vllmLog('WARNING', 'serve.py:210', 'rank 0 is gone; waiting in the collective (no exit)');
          else stalled = true;
        },
      });
      process.once('exit', () => rdv.close());
    }

    if (opts.worker) {
      vllmLog('INFO', 'worker.py:120', 'worker rank started; serving no HTTP, waiting for collectives');
      return;
    }

    const handle = (req: IncomingMessage, res: ServerResponse) => {
      // A hung engine accepts the connection and then says nothing, as one
      // stuck in a collective does: only a probe with a timeout notices.
      if (hung) return;
      if (draining) {
        sendJson(res, 503, errorBody('server is shutting down', 'ServiceUnavailableError', 503), true);
        return;
      }
      const path = (req.url ?? '/').split('?')[0];
      if (req.method === 'GET' && path === '/health') {
        res.writeHead(200, { 'content-length': '0' }).end();
      } else if (req.method === 'GET' && path === '/v1/models') {
        sendJson(res, 200, modelList(opts.model, startedS));
      } else if (req.method === 'GET' && path === '/metrics') {
        res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' }).end(metricsText(opts.model, { running, generatedTokens, promptTokens }));
      } else if (req.method === 'POST' && (path === '/v1/chat/completions' || path === '/v1/completions')) {
        running++;
        void complete(req, res, path === '/v1/chat/completions' ? 'chat' : 'text').finally(() => {
          running--;
          maybeFinishDrain();
        });
      } else {
        sendJson(res, 404, { detail: 'Not Found' });
      }
    };

    const complete = async (req: IncomingMessage, res: ServerResponse, kind: CompletionKind) => {
      let body: Record<string, unknown>;
      try {
        body = JSON.parse(await readBody(req)) as Record<string, unknown>;
        if (!body || typeof body !== 'object') throw new Error('not an object');
      } catch (err) {
        sendJson(res, 400, errorBody(`invalid JSON body: ${(err as Error).message}`, 'BadRequestError', 400));
        return;
      }
      if (body.model !== undefined && body.model !== opts.model) {
        sendJson(res, 404, errorBody(`The model \`${String(body.model)}\` does not exist.`, 'NotFoundError', 404));
        return;
      }
      const requested = body.max_tokens ?? body.max_completion_tokens;
      const n = typeof requested === 'number' && requested >= 0 ? Math.floor(requested) : opts.maxTokens;
      const id = `${kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${randomUUID().replaceAll('-', '')}`;
      // The request stream ends (and is destroyed) once its body is read; a
      // client that went away shows on the response.
      let clientGone = false;
      res.on('close', () => {
        if (!res.writableFinished) clientGone = true;
      });
      const gone = () => clientGone;
      promptTokens += countPromptTokens(body);
      // One token: after its latency, or never while stalled (until the client gives up).
      const nextToken = async (): Promise<boolean> => {
        await sleep(opts.tokenLatencyMs);
        while (stalled && !gone()) await sleep(STALL_POLL_MS);
        if (gone()) return false;
        generatedTokens++;
        return true;
      };
      if (body.stream === true) {
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
        for (let i = 0; i < n && !gone(); i++) {
          if (!(await nextToken())) break;
          res.write(`data: ${JSON.stringify(completionChunk(kind, id, opts.model, simToken(i), i === 0, i === n - 1 ? 'length' : null))}\n\n`);
        }
        res.end('data: [DONE]\n\n');
        return;
      }
      let text = '';
      for (let i = 0; i < n && !gone(); i++) {
        if (!(await nextToken())) break;
        text += simToken(i);
      }
      sendJson(res, 200, completionBody(kind, id, opts.model, text, countPromptTokens(body), n));
    };

    vllmLog('INFO', 'model_runner.py:1000', `Starting to load model ${opts.model}...`);
    if (opts.neverReady) return; // loading forever: the port never opens

    const loaded = () => later(opts.loadTimeMs, () => {
      vllmLog('INFO', 'model_runner.py:1012', `Loading model weights took ${(opts.loadTimeMs / 1000).toFixed(2)} seconds`);
      server = createServer(handle);
      server.on('error', (err) => {
        vllmLog('ERROR', 'api_server.py:1100', `cannot listen on ${opts.host}:${opts.port}: ${err.message}`);
        finish(1);
      });
      server.listen(opts.port, opts.host, () => {
        const addr = server?.address();
        const port = addr && typeof addr === 'object' ? addr.port : opts.port;
        vllmLog('INFO', 'launcher.py:28', 'Available routes are: /health, /v1/models, /v1/completions, /v1/chat/completions, /metrics');
        vllmLog('INFO', 'server.py:83', `Uvicorn running on http://${opts.host}:${port} (Press CTRL+C to quit)`);
      });
    });
    const until = opts.loadUntilFile;
    if (until === undefined) loaded();
    else {
      // Looked for every 50 ms: the test that writes it waits for what follows, never for this.
      const look = () => (existsSync(until) ? loaded() : later(50, look));
      look();
    }
  });
}


interface SimCounts {
  running: number;
  generatedTokens: number;
  promptTokens: number;
}

/**
 * vLLM's series names, types and labels (V:vllm/v1/metrics/loggers.py), so
 * drain, stall detection and dashboards read the sim as they read vLLM.
 */
function metricsText(model: string, c: SimCounts): string {
  const label = `{engine="0",model_name="${model}"}`;
  const series = (type: 'gauge' | 'counter', name: string, help: string, value: number) =>
    `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n${name}${label} ${value.toFixed(1)}\n`;
  return (
    series('gauge', 'vllm:num_requests_running', 'Number of requests in model execution batches.', c.running) +
    series('gauge', 'vllm:num_requests_waiting', 'Number of requests waiting to be processed.', 0) +
    series('gauge', 'vllm:kv_cache_usage_perc', 'KV-cache usage. 1 means 100 percent usage.', Math.min(1, c.running * 0.05)) +
    series('counter', 'vllm:prompt_tokens_total', 'Number of prefill tokens processed.', c.promptTokens) +
    series('counter', 'vllm:generation_tokens_total', 'Number of generation tokens processed.', c.generatedTokens) +
    // The sim's own, not vLLM's: log lines the kernel refused (a full log disk), dropped as Python's logging drops them.
    `# HELP llmgw_sim_log_lines_dropped_total Log lines the sim could not write.\n# TYPE llmgw_sim_log_lines_dropped_total counter\nllmgw_sim_log_lines_dropped_total ${droppedLogLines()}\n`
  );
}
