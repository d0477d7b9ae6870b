import { execa, type Options } from 'execa';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const BIN = fileURLToPath(new URL('../../bin/run.js', import.meta.url));

export interface CliResult {
  exitCode: number;
  stdout: string;
  stderr: string;
}

/** Runs the built `llmgw` binary (bin/run.js → dist/) as an operator would. */
export async function runCli(args: readonly string[], options: Options = {}): Promise<CliResult> {
  const r = await execa(process.execPath, [BIN, ...args], {
    reject: false,
    timeout: 60_000,
    stdin: 'ignore',
    ...options,
    env: { NO_COLOR: '1', ...options.env },
  });
  return { exitCode: r.exitCode ?? -1, stdout: String(r.stdout), stderr: String(r.stderr) };
}
