import { execFile } from 'node:child_process';
import { errorMessage, failure } from '../errors.js';

/** Limit for systemctl and systemd-run, which answer in milliseconds when systemd is healthy. */
export const SYSTEMCTL_TIMEOUT_MS = 30_000;

export interface SystemctlResult {
  exitCode: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs `cmd argv` (systemctl, systemd-run: the one way the agent runs
 * either) with stdin closed, never through a shell, and resolves with its
 * exit code whatever it is: callers decide what a non-zero exit means
 * (`systemctl reset-failed` of a unit that is not failed exits 1, and that
 * is fine). Rejects only when it cannot run at all, is cancelled, or
 * outlives `timeoutMs`, naming `cmd` and its first argument only: a
 * systemd-run command line holds the engine's whole argv, which may hold
 * a secret, and the error goes to the log and to the control plane.
 */
export function runSystemctl(
  argv: string[],
  opts: { cmd?: string; timeoutMs?: number; signal?: AbortSignal } = {},
): Promise<SystemctlResult> {
  const cmd = opts.cmd ?? 'systemctl';
  const timeoutMs = opts.timeoutMs ?? SYSTEMCTL_TIMEOUT_MS;
  return new Promise((resolve, reject) => {
    const child = execFile(cmd, argv, { timeout: timeoutMs, signal: opts.signal, encoding: 'utf8' }, (err, stdout, stderr) => {
      const code = err && typeof (err as { code?: unknown }).code === 'number' ? ((err as { code: number }).code) : err ? undefined : 0;
      if (code === undefined) {
        reject(failure(describeRunFailure(cmd, argv, timeoutMs, err, opts.signal), { cause: err }));
        return;
      }
      resolve({ exitCode: code, stdout, stderr });
    });
    child.stdin?.end();
  });
}

function describeRunFailure(cmd: string, argv: string[], timeoutMs: number, err: unknown, signal: AbortSignal | undefined): string {
  const what = cmd === 'systemctl' && argv[0] ? `systemctl ${argv[0]}` : cmd;
  const e = err as { code?: unknown; killed?: boolean; name?: string };
  if (signal?.aborted || e.name === 'AbortError') return `${what} was cancelled`;
  if (e.code === 'ENOENT') return `${what} is not installed (not found on PATH)`;
  if (e.killed) return `${what} did not answer within ${timeoutMs / 1000}s`;
  return `${what} could not run: ${errorMessage(err)}`;
}
