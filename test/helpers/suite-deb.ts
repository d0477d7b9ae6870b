import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { inject } from 'vitest';
import { until } from './engine-processes.js';
import { REPO_ROOT } from './run-cli.js';

/*
 * The .deb of this checkout, built once per test run (scripts/package-deb.mjs
 * costs some 10 s of CPU: it copies the production node_modules and the Node
 * runtime, then dpkg-deb writes 120 MB) for the files that need one:
 * test/packaging/deb-package.test.ts and test/systemd/deb-lifecycle.test.ts,
 * which built it each. Built under umask 000, the worst a builder's shell
 * may have, as deb-package checks that the package's modes do not follow it
 * (security review 4, F10); a package for any umask is one for the default's.
 * The folder is the run's (test/global-setup.ts makes it and removes it at
 * the end), so files in other workers share the build; whoever comes first
 * builds (an mkdir is the lock), the others wait for its outcome.
 */

declare module 'vitest' {
  export interface ProvidedContext {
    /** A folder of this test run's, for what its files build once (test/global-setup.ts). */
    suiteBuildDir: string;
  }
}

export interface SuiteDeb {
  /** The .deb's path, as package-deb.mjs printed it; undefined when the build failed. */
  deb?: string;
  exitCode: number;
  stderr: string;
}

/** Safety net for a build another worker runs: it takes seconds, minutes at the worst load seen. */
const BUILD_WAIT_MS = 300_000;

let mine: Promise<SuiteDeb> | undefined;

/** The run's .deb, built here or by another worker of the run; never a rejection for a failed build (see exitCode). */
export function suiteDeb(): Promise<SuiteDeb> {
  mine ??= buildOrWait();
  return mine;
}

async function buildOrWait(): Promise<SuiteDeb> {
  const dir = join(inject('suiteBuildDir'), 'deb');
  const outcome = join(dir, 'outcome.json');
  try {
    mkdirSync(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    await until(() => existsSync(outcome), 'the .deb another test file of this run is building', BUILD_WAIT_MS);
    return JSON.parse(readFileSync(outcome, 'utf8')) as SuiteDeb;
  }
  const built = await execa('sh', ['-c', 'umask 000 && exec node "$0" --out "$1" --compress none', join(REPO_ROOT, 'scripts/package-deb.mjs'), dir], { reject: false, stdin: 'ignore' });
  const result: SuiteDeb = { exitCode: built.exitCode ?? -1, stderr: String(built.stderr), ...(built.exitCode === 0 ? { deb: String(built.stdout).trim() } : {}) };
  // Whole or not at all, for the workers polling for it.
  writeFileSync(`${outcome}.tmp`, JSON.stringify(result));
  renameSync(`${outcome}.tmp`, outcome);
  return result;
}
