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
 * Runs `cmd argv` (systemctl, systemd-run) with stdin closed, never through a
 * shell, and resolves with its exit code whatever it is: callers decide what
 * a non-zero exit means (`systemctl reset-failed` of a unit that is not
 * failed exits 1, and that is fine). Rejects only when it cannot run at all
 * or outlives `timeoutMs`.
 */
export function runSystemctl(
  argv: string[],
  opts: { cmd?: string; timeoutMs?: number; signal?: AbortSignal } = {},
): Promise<SystemctlResult> {
  const cmd = opts.cmd ?? 'systemctl';
  return new Promise((resolve, reject) => {
    const child = execFile(cmd, argv, { timeout: opts.timeoutMs ?? SYSTEMCTL_TIMEOUT_MS, signal: opts.signal, encoding: 'utf8' }, (err, stdout, stderr) => {
      const code = err && typeof (err as { code?: unknown }).code === 'number' ? ((err as { code: number }).code) : err ? undefined : 0;
      if (code === undefined) {
        reject(failure(`${cmd} ${argv.join(' ')} failed: ${errorMessage(err)}`, { cause: err }));
        return;
      }
      resolve({ exitCode: code, stdout, stderr });
    });
    child.stdin?.end();
  });
}
