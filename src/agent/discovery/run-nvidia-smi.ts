import { spawn } from 'node:child_process';
import { formatDuration } from '../../lib/duration.js';
import { spawnTurn } from '../../lib/process/spawn-turn.js';

export type NvidiaSmiFailureKind = 'not-found' | 'timeout' | 'exit' | 'spawn';

export type NvidiaSmiResult =
  | { ok: true; stdout: string }
  | {
      ok: false;
      kind: NvidiaSmiFailureKind;
      /** One line for a warning: "nvidia-smi not found", "nvidia-smi -L timed out after 10s", … */
      reason: string;
      /** stdout and stderr together: nvidia-smi prints its errors on either. */
      output: string;
      /** stdout alone: a failing nvidia-smi may still have listed the GPUs it could reach. */
      stdout: string;
      exitCode?: number;
    };

export interface RunNvidiaSmiOptions {
  /** Hard limit for this one invocation; the process group is SIGKILLed when it passes. */
  timeoutMs: number;
  signal?: AbortSignal;
}

/** Output beyond this is a broken nvidia-smi, not a big machine (8 GPUs print a few KiB). */
const MAX_OUTPUT_BYTES = 8 * 1024 * 1024;

/** How one nvidia-smi process ended. */
interface Ended {
  stdout: string;
  stderr: string;
  /** Its exit status; null when a signal ended it or it never ran. */
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  /** Why it never ran (ENOENT, EACCES, …). */
  spawnError?: NodeJS.ErrnoException;
  /** It printed more than MAX_OUTPUT_BYTES on stdout or stderr, and was killed for it. */
  overflow: boolean;
}

/**
 * Runs nvidia-smi with an argv array (never a shell) and a hard deadline.
 * Never throws for the tool's own failures (missing, hung, non-zero exit):
 * they come back as a result that discovery turns into a warning. Throws
 * only when `signal` aborts, which is the caller's decision, not a fault.
 *
 * The child gets its own process group and the whole group is killed at the
 * deadline. Killing only the child is not enough: a wrapper script (a
 * container shim named nvidia-smi) leaves grandchildren that hold the output
 * pipe open, and the call would then wait for them long past its timeout.
 *
 * Node's own spawn, not execa: every rescan runs five of these, and
 * execa's option handling, environment building and stream plumbing were
 * two thirds of the agent's CPU for a rescan beside the spawns themselves,
 * and a quarter of its steady allocation (bench 5b, --cpu-prof).
 */
export async function runNvidiaSmi(nvidiaSmi: string, args: readonly string[], opts: RunNvidiaSmiOptions): Promise<NvidiaSmiResult> {
  opts.signal?.throwIfAborted();
  const what = ['nvidia-smi', ...args.map(shorten)].join(' ');
  // Callers run several at once (Promise.all): each spawn blocks the loop until its child has exec'd (spawn-turn.ts).
  await spawnTurn();
  opts.signal?.throwIfAborted();
  let timedOut = false;
  let pid: number | undefined;
  const killGroup = () => {
    if (pid === undefined) return;
    try {
      process.kill(-pid, 'SIGKILL');
    } catch {
      // ESRCH: the group is already gone.
    }
  };
  const timer = setTimeout(() => {
    timedOut = true;
    killGroup();
  }, opts.timeoutMs);
  const onAbort = () => killGroup();
  opts.signal?.addEventListener('abort', onAbort, { once: true });
  try {
    const r = await run(nvidiaSmi, args, (p) => {
      pid = p;
    }, killGroup);
    opts.signal?.throwIfAborted();
    const stdout = r.stdout;
    const output = [stdout, r.stderr].filter((s) => s.trim() !== '').join('\n');
    if (timedOut) {
      return { ok: false, kind: 'timeout', reason: `${what} did not answer within ${formatDuration(opts.timeoutMs)}`, output, stdout };
    }
    if (r.spawnError?.code === 'ENOENT') return { ok: false, kind: 'not-found', reason: `${describe(nvidiaSmi)} not found`, output, stdout };
    if (r.spawnError?.code === 'EACCES') return { ok: false, kind: 'spawn', reason: `${describe(nvidiaSmi)} is not executable`, output, stdout };
    if (r.spawnError) return { ok: false, kind: 'spawn', reason: `${what} could not run: ${r.spawnError.message}`, output, stdout };
    if (r.overflow) return { ok: false, kind: 'spawn', reason: `${what} could not run: it printed more than ${MAX_OUTPUT_BYTES} bytes`, output, stdout };
    if (r.exitCode === null) return { ok: false, kind: 'spawn', reason: `${what} could not run: it was killed with ${r.signal ?? 'a signal'}`, output, stdout };
    if (r.exitCode !== 0) {
      const first = output.split('\n').find((l) => l.trim() !== '')?.trim() ?? '';
      return {
        ok: false,
        kind: 'exit',
        exitCode: r.exitCode,
        reason: `${what} exited with ${r.exitCode}${first ? `: ${first}` : ''}`,
        output,
        stdout,
      };
    }
    return { ok: true, stdout };
  } finally {
    clearTimeout(timer);
    opts.signal?.removeEventListener('abort', onAbort);
  }
}

/**
 * One nvidia-smi in its own process group, stdin closed, in the C locale
 * (parsers read English: numbers and messages stay stable), its output
 * collected up to MAX_OUTPUT_BYTES a stream. Resolves once it has ended and
 * both pipes are closed, or at once when it could not be started.
 */
function run(nvidiaSmi: string, args: readonly string[], started: (pid: number) => void, killGroup: () => void): Promise<Ended> {
  return new Promise((resolve) => {
    const child = spawn(nvidiaSmi, args, { stdio: ['ignore', 'pipe', 'pipe'], detached: true, env: { ...process.env, LC_ALL: 'C' } });
    if (child.pid !== undefined) started(child.pid);
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let outBytes = 0;
    let errBytes = 0;
    let overflow = false;
    const take = (into: Buffer[], chunk: Buffer, bytes: number): number => {
      if (overflow) return bytes;
      if (bytes + chunk.length > MAX_OUTPUT_BYTES) {
        overflow = true;
        killGroup();
        return bytes;
      }
      into.push(chunk);
      return bytes + chunk.length;
    };
    child.stdout?.on('data', (c: Buffer) => {
      outBytes = take(out, c, outBytes);
    });
    child.stderr?.on('data', (c: Buffer) => {
      errBytes = take(err, c, errBytes);
    });
    let settled = false;
    const end = (e: Omit<Ended, 'stdout' | 'stderr' | 'overflow'>) => {
      if (settled) return;
      settled = true;
      resolve({ ...e, stdout: text(out), stderr: text(err), overflow });
    };
    // A spawn that failed (ENOENT, EACCES) emits 'error' and may never emit 'close'.
    child.once('error', (e: NodeJS.ErrnoException) => end({ exitCode: null, signal: null, spawnError: e }));
    child.once('close', (code, signal) => end({ exitCode: code, signal }));
  });
}

/** A stream's bytes as text without its final newline, as the parsers and warnings have always read it. */
function text(chunks: Buffer[]): string {
  const s = Buffer.concat(chunks).toString('utf8');
  if (!s.endsWith('\n')) return s;
  return s.endsWith('\r\n') ? s.slice(0, -2) : s.slice(0, -1);
}

/** "nvidia-smi" for the usual name, the path otherwise, so a warning says which binary. */
function describe(nvidiaSmi: string): string {
  return nvidiaSmi === 'nvidia-smi' ? 'nvidia-smi' : `nvidia-smi (${nvidiaSmi})`;
}

/** Long --query-gpu lists make unreadable warnings; the option name is enough. */
function shorten(arg: string): string {
  const eq = arg.indexOf('=');
  return eq > 0 && arg.length > 40 ? `${arg.slice(0, eq)}=…` : arg;
}
