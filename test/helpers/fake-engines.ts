import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import type { TestContext } from 'vitest';
import { groupMembers, until } from './engine-processes.js';
import { REPO_ROOT } from './run-cli.js';

/** The engine doubles that ship with the package (they run dist/, so the build must be current). */
export const FAKE_VLLM = join(REPO_ROOT, 'bin/fake-vllm');
export const FAKE_SGLANG = join(REPO_ROOT, 'bin/fake-sglang');

export interface FakeEngine {
  child: ChildProcess;
  pid: number;
  output: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/**
 * Starts a double as the leader of its own process group, so a test can
 * signal the group as a supervisor would; `killFakeEngines` ends every group
 * started, even after a failed test.
 */
export function startFakeEngine(bin: string, args: string[], env: Record<string, string> = {}): FakeEngine {
  const child = spawn(bin, args, { detached: true, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  started.push(child);
  let out = '';
  child.stdout?.on('data', (c) => {
    out += c;
  });
  child.stderr?.on('data', (c) => {
    out += c;
  });
  // Resolved once its output is all read too: 'exit' can come before the pipes' last bytes (a double that prints
  // its refusal and exits at once; seen in a fresh-clone run with its tests side by side). A process of its group
  // that outlives it holds the pipes open: then 2 s after its exit, with what came so far.
  const drained = Promise.all([child.stdout, child.stderr].map((s) => (s && !s.readableEnded ? once(s, 'close').catch(() => undefined) : undefined)));
  const exited = once(child, 'exit').then(async ([code, signal]) => {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([drained, new Promise((r) => (timer = setTimeout(r, 2_000)))]);
    clearTimeout(timer);
    return { code, signal };
  });
  return { child, pid: child.pid as number, output: () => out, exited };
}

const started: ChildProcess[] = [];

export async function killFakeEngines(): Promise<void> {
  await killGroups(started.splice(0));
}

async function killGroups(children: ChildProcess[]): Promise<void> {
  for (const child of children) {
    try {
      process.kill(-(child.pid as number), 'SIGKILL');
    } catch {}
    await until(() => groupMembers(child.pid as number).length === 0, 'the double and its children to be gone', 10_000);
  }
}

/**
 * startFakeEngine for a test that runs beside others (it.concurrent): the
 * doubles it starts, and only those, are killed when that test finishes,
 * where afterEach(killFakeEngines) would kill the other tests' too. Takes
 * the test's own context: vitest tracks no concurrent test in its globals.
 */
export function fakeEnginesOf({ onTestFinished }: Pick<TestContext, 'onTestFinished'>): typeof startFakeEngine {
  const mine: ChildProcess[] = [];
  onTestFinished(() => killGroups(mine.splice(0)));
  return (bin, args, env) => {
    const e = startFakeEngine(bin, args, env);
    // Not left for killFakeEngines: another file's afterEach in this worker must not find it.
    started.splice(started.indexOf(e.child), 1);
    mine.push(e.child);
    return e;
  };
}

/** Waits until the double's output matches. */
export const outputMatches = (e: FakeEngine, re: RegExp, timeoutMs?: number) => until(() => re.test(e.output()), `output ${re}`, timeoutMs);

/** Counts SSE tokens as they arrive, until the stream ends or is cut; `cut` when it did not end with [DONE]. */
export async function consumeStream(res: Response, onEvent: (n: number) => void = () => {}): Promise<{ tokens: number; done: boolean }> {
  const reader = res.body?.getReader();
  const dec = new TextDecoder();
  let buf = '';
  let tokens = 0;
  let done = false;
  try {
    for (;;) {
      const r = await reader!.read();
      if (r.done) break;
      buf += dec.decode(r.value, { stream: true });
      let i = buf.indexOf('\n\n');
      while (i !== -1) {
        const ev = buf.slice(0, i);
        buf = buf.slice(i + 2);
        if (ev === 'data: [DONE]') done = true;
        else if (!ev.includes('"error"')) onEvent(++tokens);
        i = buf.indexOf('\n\n');
      }
    }
  } catch {
    // the connection was cut
  }
  return { tokens, done };
}
