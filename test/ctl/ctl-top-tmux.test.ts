import { execFileSync } from 'node:child_process';
import { appendFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import { freePort, until } from '../helpers/engine-processes.js';
import { kmsgAgent, xid79Line } from '../helpers/kmsg-agent.js';
import { BIN, runCli } from '../helpers/run-cli.js';
import { shardIs, simStart } from '../helpers/sim-shards.js';

/*
 * `llmgw ctl top` in a real terminal: a tmux server of its own (-S, its socket in a temp folder), a
 * 160×48 pane running a plain shell, keys sent as an operator types them,
 * the screen read back with capture-pane.
 */

const PROMPT = 'top-test$ ';

function tmuxServer() {
  // tmux 3.3a leaves its socket file behind after kill-server: the socket goes in a folder of the test's, removed with it.
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-top-tmux-'));
  const tmux = (...args: string[]) => execFileSync('tmux', ['-S', join(dir, 'socket'), ...args], { encoding: 'utf8' });
  onTestFinished(() => {
    try {
      tmux('kill-server');
    } catch {
      // Never started, or already gone.
    }
    rmSync(dir, { recursive: true, force: true });
  });
  tmux('new-session', '-d', '-x', '160', '-y', '48', '-s', 't', 'env', '-i', `PATH=${process.env.PATH}`, 'TERM=xterm-256color', 'NO_COLOR=1', `PS1=${PROMPT}`, 'bash', '--norc', '--noprofile');
  return {
    tmux,
    screen: () => tmux('capture-pane', '-p', '-t', 't'),
    keys: (...keys: string[]) => tmux('send-keys', '-t', 't', ...keys),
    /** Whether the pane shows the alternate screen now. */
    alternate: () => tmux('display-message', '-p', '-t', 't', '#{alternate_on}').trim() === '1',
    cursorShown: () => tmux('display-message', '-p', '-t', 't', '#{cursor_flag}').trim() === '1',
  };
}

async function untilScreen(t: ReturnType<typeof tmuxServer>, re: RegExp, what: string, timeoutMs = 20_000): Promise<string> {
  let last = '';
  await until(
    () => {
      last = t.screen();
      return re.test(last);
    },
    `${what}; the screen was:\n${last}`,
    timeoutMs,
  ).catch((err) => {
    throw new Error(`${err.message}\n--- screen ---\n${last}`);
  });
  return last;
}

/*
 * One agent for the three tests: the first makes the only shard (s1) and the
 * only fault (GPU 2), and runs first, as it counts them (SHARDS 1/1); the
 * others only read a first frame and a snapshot, whatever the agent runs.
 * They share its start (an agent and a control plane, some 2 s here).
 */
describe('llmgw ctl top in a terminal', () => {
  const ends: Array<() => unknown> = [];
  let a: Awaited<ReturnType<typeof kmsgAgent>>;
  beforeAll(async () => {
    a = await kmsgAgent('llmgw-top-', (fn) => ends.push(fn));
  }, 60_000);
  afterAll(async () => {
    for (const fn of ends.reverse()) await fn();
  }, 60_000);

  it('shows a shard going STARTING → READY and a GPU fault as they happen; q quits and gives the shell its screen, cursor and line editing back', async () => {
    const t = tmuxServer();
    await untilScreen(t, /top-test\$/, 'the shell prompt');
    t.keys(`${process.execPath} ${BIN} ctl top --socket ${a.socket}`, 'Enter');
    await untilScreen(t, /GPUS 8/, 'the first frame');
    expect(t.alternate()).toBe(true);

    // A sim engine that loads for 3 s: long enough to be seen STARTING.
    const ready = a.cp.waitFor('node-a', shardIs('s1', ShardState.READY), 30_000);
    const s1Port = await freePort();
    a.cp.send('node-a', { case: 'start', value: simStart('s1', s1Port, { args: ['--load-time', '3s'] }) });
    await untilScreen(t, /^s1 +STARTING /m, 's1 STARTING');
    await ready;
    await untilScreen(t, /^s1 +READY /m, 's1 READY');
    await untilScreen(t, /shard +s1 +STARTING → READY/, 'the transition in the event pane');

    // A stream that generates: s1's row shows it in flight and a token rate (the agent's reading, every health interval).
    const load = new AbortController();
    const body = JSON.stringify({ model: 'm', prompt: 'x', max_tokens: 100_000, stream: true });
    void fetch(`http://127.0.0.1:${s1Port}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body, signal: load.signal })
      .then((r) => r.text())
      .catch(() => undefined);
    try {
      const busy = await untilScreen(t, /^s1 +READY +\S+ +1 +(?!0\.0 )\d[\d.]*k? +\S*[▁▂▃▄▅▆▇█]/m, 's1 with 1 in flight and tokens/s above 0', 60_000);
      console.info(`--- ctl top with s1 generating, capture-pane ---\n${busy}`);
    } finally {
      load.abort();
    }

    // An Xid 79 on GPU 2, as the driver writes it to the kernel log.
    const injectedAt = Date.now();
    appendFileSync(a.kmsg, xid79Line());
    const faulted = await untilScreen(t, /^2 +\S+ \d+\/\d+ MiB +FAULT +1 +Xid 79: GPU has fallen off the bus/m, 'GPU 2 FAULT', 10_000);
    const shownMs = Date.now() - injectedAt;
    console.info(`ctl top showed the Xid 79 on GPU 2 ${shownMs} ms after the kernel-log line was written (capture-pane polled every 50 ms)`);
    expect(faulted).toMatch(/gpu +gpu 2 +GPU 2: Xid 79/);
    // How soon is a measurement (printed above), not a limit: untilScreen's 10 s is the safety net.
    console.info(`--- ctl top, capture-pane ---\n${faulted}`);

    // s cycles the sort; / filters by text.
    t.keys('s');
    await untilScreen(t, /sort: age/, 'the sort cycled from state to age');
    t.keys('/', 'n', 'o', 'n', 'e', 'Enter');
    await untilScreen(t, /SHARDS 0\/1 \(sort: age, filter "none"\)/, 'the filter applied');
    t.keys('Escape');
    await untilScreen(t, /SHARDS 1\/1 \(sort: age\)/, 'the filter cleared');

    t.keys('q');
    // capture-pane drops trailing blanks: the prompt alone on a line.
    await untilScreen(t, /^top-test\$$/m, 'the shell prompt again');
    expect(t.alternate()).toBe(false);
    expect(t.cursorShown()).toBe(true);
    // Line editing is back (raw mode off): the terminal echoes and is canonical.
    t.keys('stty -a | grep -o -- "-*icanon\\|-*echo " | tr "\\n" " "; echo', 'Enter');
    const after = await untilScreen(t, /icanon echo/, 'stty after quitting');
    expect(after).not.toMatch(/-icanon/);
  }, 120_000);

  it('gives the terminal back when it is sent SIGTERM', async () => {
    const t = tmuxServer();
    await untilScreen(t, /top-test\$/, 'the shell prompt');
    t.keys(`${process.execPath} ${BIN} ctl top --socket ${a.socket}; echo "exit=$?"`, 'Enter');
    await untilScreen(t, /GPUS 8/, 'the first frame');
    const shell = t.tmux('display-message', '-p', '-t', 't', '#{pane_pid}').trim();
    const top = execFileSync('pgrep', ['-P', shell], { encoding: 'utf8' }).trim().split('\n')[0] as string;
    process.kill(Number(top), 'SIGTERM');
    await untilScreen(t, /exit=143/, 'top ended by SIGTERM');
    expect(t.alternate()).toBe(false);
    expect(t.cursorShown()).toBe(true);
  }, 120_000);

  it('prints a plain snapshot when stdout is not a terminal, and with --once', async () => {
    const r = await runCli(['ctl', 'top', '--once', '--socket', a.socket]);
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toMatch(/^llmgw top {2}node node-a/);
    expect(r.stdout).toMatch(/GPUS 8/);
    expect(r.stdout).toMatch(/^SHARD +STATE +AGE +IN-FL +TOK\/S +TOK\/S 60s +GPUS/m);
    expect(r.stdout).not.toContain('\x1b[');
  }, 120_000);
});
