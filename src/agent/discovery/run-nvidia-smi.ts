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
 */
export async function runNvidiaSmi(nvidiaSmi: string, args: readonly string[], opts: RunNvidiaSmiOptions): Promise<NvidiaSmiResult> {
  opts.signal?.throwIfAborted();
  const what = ['nvidia-smi', ...args.map(shorten)].join(' ');
  // Loaded on first use: the agent registers from its cached inventory
  // before discovery runs, and should not pay for execa before then.
  const { execa } = await import('execa');
  // Callers run several at once (Promise.all): each spawn blocks the loop until its child has exec'd (spawn-turn.ts).
  await spawnTurn();
  opts.signal?.throwIfAborted();
  const sub = execa(nvidiaSmi, args, {
    reject: false,
    stdin: 'ignore',
    detached: true,
    maxBuffer: MAX_OUTPUT_BYTES,
    // Parsers read English: the C locale keeps numbers and messages stable.
    env: { LC_ALL: 'C' },
  });
  let timedOut = false;
  const killGroup = () => {
    if (sub.pid === undefined) return;
    try {
      process.kill(-sub.pid, 'SIGKILL');
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
    const r = await sub;
    opts.signal?.throwIfAborted();
    const stdout = String(r.stdout ?? '');
    const output = [stdout, String(r.stderr ?? '')].filter((s) => s.trim() !== '').join('\n');
    if (timedOut) {
      return { ok: false, kind: 'timeout', reason: `${what} did not answer within ${formatDuration(opts.timeoutMs)}`, output, stdout };
    }
    if (r.code === 'ENOENT') return { ok: false, kind: 'not-found', reason: `${describe(nvidiaSmi)} not found`, output, stdout };
    if (r.code === 'EACCES') return { ok: false, kind: 'spawn', reason: `${describe(nvidiaSmi)} is not executable`, output, stdout };
    if (r.failed && r.exitCode === undefined) {
      return { ok: false, kind: 'spawn', reason: `${what} could not run: ${r.shortMessage}`, output, stdout };
    }
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

/** "nvidia-smi" for the usual name, the path otherwise, so a warning says which binary. */
function describe(nvidiaSmi: string): string {
  return nvidiaSmi === 'nvidia-smi' ? 'nvidia-smi' : `nvidia-smi (${nvidiaSmi})`;
}

/** Long --query-gpu lists make unreadable warnings; the option name is enough. */
function shorten(arg: string): string {
  const eq = arg.indexOf('=');
  return eq > 0 && arg.length > 40 ? `${arg.slice(0, eq)}=…` : arg;
}
