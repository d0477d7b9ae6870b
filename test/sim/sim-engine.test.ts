import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { closeSync, mkdtempSync, openSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, it, type TestContext } from 'vitest';
import { freePort, groupMembers, isRunning, procInfo, until } from '../helpers/engine-processes.js';
import { BIN } from '../helpers/run-cli.js';

interface Sim {
  child: ChildProcess;
  port: number;
  url: string;
  output: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/*
 * The tests run side by side (describe.concurrent): most of each is waiting on a sim's timers (a load,
 * token latency, a stall, a drain). Each kills only the sims it started (and the processes that left
 * their groups) when it ends, and takes expect from its context: vitest tracks no concurrent test in its
 * globals.
 */

/** SIGKILLs `child`'s process group and waits until it is empty. */
async function killGroup(child: ChildProcess): Promise<void> {
  try {
    process.kill(-(child.pid as number), 'SIGKILL');
  } catch {}
  await until(() => groupMembers(child.pid as number).length === 0, 'the sim to be gone', 10_000);
}

/** A process that left the sims' groups, which a group kill cannot reach: killed when the test ends. */
function killWhenDone(ctx: TestContext, pid: number): void {
  ctx.onTestFinished(async () => {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {}
    await until(() => !isRunning(pid), `escaped pid ${pid} to be gone`, 10_000);
  });
}

async function startSim(ctx: TestContext, args: string[], waitFor = /Uvicorn running/): Promise<Sim> {
  const port = await freePort();
  const child = spawn(process.execPath, [BIN, 'sim', 'engine', '--port', String(port), ...args], {
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  ctx.onTestFinished(() => killGroup(child));
  let out = '';
  child.stdout?.on('data', (c) => {
    out += c;
  });
  child.stderr?.on('data', (c) => {
    out += c;
  });
  const exited = once(child, 'exit').then(([code, signal]) => ({ code, signal }));
  await until(() => waitFor.test(out), `sim output ${waitFor}`);
  return { child, port, url: `http://127.0.0.1:${port}`, output: () => out, exited };
}

const post = (url: string, body: unknown) =>
  fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

/** One series of the sim's /metrics, by its exposed name; NaN when absent. */
const series = async (url: string, name: string) => {
  const text = await (await fetch(`${url}/metrics`)).text();
  return Number(new RegExp(`^${name}\\{engine="0",model_name="m"\\} (\\S+)$`, 'm').exec(text)?.[1]);
};
const running_ = (url: string) => series(url, 'vllm:num_requests_running');
const tokens_ = (url: string) => series(url, 'vllm:generation_tokens_total');

describe.concurrent('llmgw sim engine', () => {
  it('answers /health with an empty 200 and lists its model on /v1/models', async (ctx) => {
    const { expect } = ctx;
    const sim = await startSim(ctx, ['--model', 'm']);
    const health = await fetch(`${sim.url}/health`);
    expect(health.status).toBe(200);
    expect(await health.text()).toBe('');
    const models = await (await fetch(`${sim.url}/v1/models`)).json();
    expect(models).toMatchObject({ object: 'list', data: [{ id: 'm', object: 'model' }] });
    expect(sim.output()).toMatch(/Starting to load model m/);
  });

  it('keeps its port closed while loading, as vLLM does', async (ctx) => {
    const { expect } = ctx;
    // A load far longer than the test: the closed port is seen while it surely loads, whatever the machine's load.
    const loading = await startSim(ctx, ['--model', 'm', '--load-time', '600s'], /Starting to load model/);
    await expect(fetch(`${loading.url}/health`)).rejects.toMatchObject({ cause: { code: 'ECONNREFUSED' } });
    const sim = await startSim(ctx, ['--model', 'm', '--load-time', '200ms'], /Starting to load model/);
    await until(() => /Uvicorn running/.test(sim.output()), 'loaded');
    expect((await fetch(`${sim.url}/health`)).status).toBe(200);
  });

  it('with --load-until-file keeps its port closed until the file exists, then opens it', async (ctx) => {
    const { expect } = ctx;
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-sim-until-'));
    try {
      const file = join(dir, 'loaded');
      const sim = await startSim(ctx, ['--model', 'm', '--load-until-file', file], /Starting to load model/);
      // Several of its 50 ms looks: still loading, the port closed.
      await sleep(300);
      await expect(fetch(`${sim.url}/health`)).rejects.toMatchObject({ cause: { code: 'ECONNREFUSED' } });
      expect(sim.output()).not.toMatch(/Uvicorn running/);
      closeSync(openSync(file, 'w'));
      await until(() => /Uvicorn running/.test(sim.output()), 'loaded once the file exists');
      expect((await fetch(`${sim.url}/health`)).status).toBe(200);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('answers chat and text completions in the OpenAI shape', async (ctx) => {
    const { expect } = ctx;
    const sim = await startSim(ctx, ['--model', 'm', '--max-tokens', '4']);
    const chat = await (await post(`${sim.url}/v1/chat/completions`, { model: 'm', messages: [{ role: 'user', content: 'hi you' }] })).json();
    expect(chat).toMatchObject({
      object: 'chat.completion',
      model: 'm',
      choices: [{ index: 0, message: { role: 'assistant', content: 'the model is simulated' }, finish_reason: 'length' }],
      usage: { prompt_tokens: 2, completion_tokens: 4, total_tokens: 6 },
    });
    const text = await (await post(`${sim.url}/v1/completions`, { model: 'm', prompt: 'x', max_tokens: 2 })).json();
    expect(text).toMatchObject({ object: 'text_completion', choices: [{ text: 'the model' }] });
    const wrong = await post(`${sim.url}/v1/completions`, { model: 'nope', prompt: 'x' });
    expect(wrong.status).toBe(404);
    expect(await wrong.json()).toMatchObject({ object: 'error', message: 'The model `nope` does not exist.' });
  });

  it('streams SSE chunks and ends with data: [DONE]', async (ctx) => {
    const { expect } = ctx;
    const sim = await startSim(ctx, ['--model', 'm']);
    const res = await post(`${sim.url}/v1/chat/completions`, { model: 'm', messages: [], max_tokens: 3, stream: true });
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    const events = (await res.text()).split('\n\n').filter(Boolean);
    expect(events.at(-1)).toBe('data: [DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e.replace(/^data: /, '')));
    expect(chunks).toHaveLength(3);
    expect(chunks.every((c) => c.object === 'chat.completion.chunk')).toBe(true);
    expect(chunks[0].choices[0].delta).toEqual({ role: 'assistant', content: 'the' });
    expect(chunks.map((c) => c.choices[0].delta.content).join('')).toBe('the model is');
    expect(chunks[2].choices[0].finish_reason).toBe('length');
  });

  it('counts requests in flight in vllm:num_requests_running', async (ctx) => {
    const { expect } = ctx;
    const sim = await startSim(ctx, ['--model', 'm', '--token-latency', '100ms']);
    expect(await running_(sim.url)).toBe(0);
    const metrics = await (await fetch(`${sim.url}/metrics`)).text();
    expect(metrics).toMatch(/# TYPE vllm:num_requests_waiting gauge/);
    expect(metrics).toMatch(/vllm:kv_cache_usage_perc\{engine="0",model_name="m"\} /);
    const a = post(`${sim.url}/v1/completions`, { prompt: 'x', max_tokens: 10 });
    const b = post(`${sim.url}/v1/completions`, { prompt: 'x', max_tokens: 10, stream: true }).then((r) => r.text());
    await until(async () => (await running_(sim.url)) === 2, 'two in flight');
    await Promise.all([a, b]);
    expect(await running_(sim.url)).toBe(0);
  });

  it('counts every generated token in the vllm:generation_tokens_total counter', async (ctx) => {
    const { expect } = ctx;
    const sim = await startSim(ctx, ['--model', 'm']);
    expect(await (await fetch(`${sim.url}/metrics`)).text()).toMatch(/# TYPE vllm:generation_tokens_total counter\n/);
    expect(await tokens_(sim.url)).toBe(0);
    await (await post(`${sim.url}/v1/completions`, { prompt: 'x', max_tokens: 5 })).json();
    await (await post(`${sim.url}/v1/chat/completions`, { messages: [], max_tokens: 3, stream: true })).text();
    expect(await tokens_(sim.url)).toBe(8);
    expect(await series(sim.url, 'vllm:prompt_tokens_total')).toBe(1);
  });

  it('after --stall-after keeps /health 200 and takes requests, but generates nothing: running up, counter flat', async (ctx) => {
    const { expect } = ctx;
    const sim = await startSim(ctx, ['--model', 'm', '--stall-after', '3s', '--token-latency', '10ms']);
    await (await post(`${sim.url}/v1/completions`, { prompt: 'x', max_tokens: 4 })).json();
    expect(await tokens_(sim.url)).toBe(4);
    await until(() => /no progress; requests running, no tokens produced/.test(sim.output()), 'the stall');
    const abort = new AbortController();
    // Ends only when the sim is killed at the test's end.
    void post(`${sim.url}/v1/completions`, { prompt: 'x', max_tokens: 4 }).catch(() => undefined);
    const stuckStream = fetch(`${sim.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'x', max_tokens: 4, stream: true }),
      signal: abort.signal,
    }).catch(() => undefined);
    await until(async () => (await running_(sim.url)) === 2, 'two requests running');
    await new Promise((r) => setTimeout(r, 1000));
    expect(await running_(sim.url)).toBe(2);
    expect(await tokens_(sim.url)).toBe(4);
    expect((await fetch(`${sim.url}/health`)).status).toBe(200);
    expect((await fetch(`${sim.url}/v1/models`)).status).toBe(200);
    // A client that gives up is no longer running, as in vLLM.
    abort.abort();
    await stuckStream;
    await until(async () => (await running_(sim.url)) === 1, 'the aborted request to end');
  });

  it('with --spawn-escaping-child starts a grandchild in a session of its own, which a group kill leaves running', async (ctx) => {
    const { expect } = ctx;
    const sim = await startSim(ctx, ['--model', 'm', '--spawn-escaping-child'], /Escaped worker process \d+ ready/);
    const pid = Number(/Escaped worker process (\d+) ready/.exec(sim.output())?.[1]);
    killWhenDone(ctx, pid);
    const pgid = sim.child.pid as number;
    expect(procInfo(pid)?.pgid).toBe(pid);
    expect(groupMembers(pgid)).not.toContain(pid);
    process.kill(-pgid, 'SIGKILL');
    await until(() => groupMembers(pgid).length === 0, 'the sim group to be gone');
    expect(isRunning(pid)).toBe(true);
  });

  it('on SIGTERM finishes in-flight requests, accepts no more, and exits 0', async (ctx) => {
    const { expect } = ctx;
    const sim = await startSim(ctx, ['--model', 'm', '--token-latency', '100ms']);
    const inFlight = post(`${sim.url}/v1/completions`, { prompt: 'x', max_tokens: 10 }).then(
      (r) => r.json() as Promise<{ choices: { text: string }[] }>,
    );
    await until(async () => (await running_(sim.url)) === 1, 'one in flight');
    sim.child.kill('SIGTERM');
    await until(() => /received SIGTERM; finishing 1 in-flight/.test(sim.output()), 'the SIGTERM to land');
    await expect(fetch(`${sim.url}/health`)).rejects.toThrow();
    const done = await inFlight;
    expect(done.choices[0].text.split(' ')).toHaveLength(10);
    expect(await sim.exited).toEqual({ code: 0, signal: null });
  });

  it('crashes after --fail-after with --exit-code and a plausible error line', async (ctx) => {
    const { expect } = ctx;
    const sim = await startSim(ctx, ['--fail-after', '300ms', '--exit-code', '9', '--load-time', '1m'], /Starting to load/);
    expect(await sim.exited).toEqual({ code: 9, signal: null });
    expect(sim.output()).toMatch(/ERROR .*CUDA error/);
  });

  it('stops answering everything after --hang-after, and stays alive', async (ctx) => {
    const { expect } = ctx;
    const sim = await startSim(ctx, ['--model', 'm', '--hang-after', '500ms']);
    await until(() => /shared memory broadcast/.test(sim.output()), 'the hang');
    await expect(fetch(`${sim.url}/health`, { signal: AbortSignal.timeout(1000) })).rejects.toThrow();
    expect(isRunning(sim.child.pid as number)).toBe(true);
  });

  it('ignores SIGTERM with --ignore-sigterm, and its --spawn-child grandchild shares its group', async (ctx) => {
    const { expect } = ctx;
    const sim = await startSim(ctx, ['--ignore-sigterm', '--spawn-child'], /Worker process \d+ ready/);
    const pgid = sim.child.pid as number;
    expect(groupMembers(pgid)).toHaveLength(2);
    process.kill(-pgid, 'SIGTERM');
    await until(() => /received SIGTERM; ignoring it/.test(sim.output()), 'the SIGTERM to land');
    await new Promise((r) => setTimeout(r, 300));
    expect(groupMembers(pgid)).toHaveLength(2);
  });

  it('as --worker serves no HTTP, stays alive and logs at --log-rate', async (ctx) => {
    const { expect } = ctx;
    const sim = await startSim(ctx, ['--worker', '--log-rate', '50'], /worker rank started/);
    await until(() => (sim.output().match(/Avg prompt throughput/g) ?? []).length >= 10, 'log lines');
    await expect(fetch(`${sim.url}/health`)).rejects.toMatchObject({ cause: { code: 'ECONNREFUSED' } });
    expect(isRunning(sim.child.pid as number)).toBe(true);
  });

  it('with --never-ready stays alive and never opens its port', async (ctx) => {
    const { expect } = ctx;
    const sim = await startSim(ctx, ['--never-ready'], /Starting to load/);
    await new Promise((r) => setTimeout(r, 500));
    await expect(fetch(`${sim.url}/health`)).rejects.toMatchObject({ cause: { code: 'ECONNREFUSED' } });
    expect(isRunning(sim.child.pid as number)).toBe(true);
  });

  it.skipIf(process.getuid?.() !== 0)('keeps serving when its log disk is full, drops and counts the lines, and logs again when space returns', async ({ expect }) => {
    // A real full filesystem: a 64 KiB tmpfs holding the log, as a full /var/log/llmgw would.
    const dir = mkdtempSync(join(tmpdir(), 'sim-full-'));
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', dir]);
    let child: ChildProcess | undefined;
    try {
      const log = openSync(join(dir, 'engine.log'), 'a');
      const port = await freePort();
      child = spawn(process.execPath, [BIN, 'sim', 'engine', '--port', String(port), '--model', 'm', '--log-rate', '2000'], {
        detached: true,
        stdio: ['ignore', log, log],
      });
      closeSync(log);
      const url = `http://127.0.0.1:${port}`;
      const dropped = async () => {
        const text = await (await fetch(`${url}/metrics`)).text();
        return Number(/^llmgw_sim_log_lines_dropped_total (\S+)$/m.exec(text)?.[1]);
      };
      await until(async () => (await fetch(`${url}/health`).catch(() => undefined))?.status === 200, 'the sim to serve');
      await until(async () => (await dropped()) > 0, 'the log disk to fill and lines to be dropped');
      // Full for a while: still alive and still answering.
      await sleep(1000);
      expect(child.exitCode, 'the sim is still running').toBeNull();
      const answer = await post(`${url}/v1/completions`, { model: 'm', prompt: 'x', max_tokens: 2 });
      expect(answer.status).toBe(200);
      const full = statSync(join(dir, 'engine.log')).size;
      execFileSync('mount', ['-o', 'remount,size=4m', dir]);
      await until(() => statSync(join(dir, 'engine.log')).size > full + 1024, 'the log to grow again once space returns');
    } finally {
      if (child) await killGroup(child);
      // A process just killed may still hold the mount for a moment ("target is busy", seen in CI):
      // tried again until it lets go, and detached lazily at worst, so no test leaves a mount behind.
      const unmounted = () => {
        try {
          execFileSync('umount', [dir], { stdio: 'ignore' });
          return true;
        } catch {
          return false;
        }
      };
      await until(unmounted, 'the tmpfs to be unmounted', 10_000).catch(() => execFileSync('umount', ['-l', dir]));
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
