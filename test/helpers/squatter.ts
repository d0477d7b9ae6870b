import { type ChildProcess, spawn } from 'node:child_process';

/*
 * A local unprivileged user holding a port an engine is about to bind, for
 * the port-squatting findings of the security reviews (test/security). One
 * copy of the set-up both tests had written out.
 */

export const NOBODY = 65534;

export interface Squatter {
  child: ChildProcess;
  /** Every line it printed other than "up". */
  lines: string[];
  /** Resolves once it printed "up" (it listens); rejects if it exits first. */
  up: Promise<void>;
}

const running: ChildProcess[] = [];

/**
 * Runs `code` (node -e) as nobody with no groups, from `/` and inline: nobody
 * may not read a checkout under /root. The code prints "up" once it listens.
 */
export function startSquatter(code: string): Squatter {
  const child = spawn('setpriv', [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, '--clear-groups', process.execPath, '-e', code], {
    cwd: '/',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  running.push(child);
  const lines: string[] = [];
  const up = new Promise<void>((resolve, reject) => {
    child.once('exit', (c) => reject(new Error(`the squatter exited (${c}) before it listened`)));
    child.stdout?.on('data', (b: Buffer) => {
      for (const line of b.toString().trim().split('\n')) {
        if (line === 'up') resolve();
        else lines.push(line);
      }
    });
  });
  up.catch(() => undefined);
  return { child, lines, up };
}

/** SIGKILLs every squatter still running; for afterEach, so a failed test leaves none. */
export function killSquatters(): void {
  for (const s of running.splice(0)) {
    if (s.exitCode === null && s.signalCode === null) s.kill('SIGKILL');
  }
}
