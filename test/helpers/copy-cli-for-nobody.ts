import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { REPO_ROOT } from './run-cli.js';

/**
 * A package's directory as Node resolves `name` from `fromDir`: the nearest
 * node_modules/<name> on the way up to the checkout.
 */
function resolvePackageDir(name: string, fromDir: string): string | undefined {
  for (let dir = fromDir; ; dir = dirname(dir)) {
    const candidate = join(dir, 'node_modules', name);
    if (existsSync(join(candidate, 'package.json'))) return candidate;
    if (dir === REPO_ROOT || dir === dirname(dir)) return undefined;
  }
}

/** The checkout's packages that its runtime dependencies need (dev tools left out), by walking their package.json files. */
function runtimePackageDirs(): string[] {
  const seen = new Set<string>();
  const walk = (pkgDir: string, includeOwn: boolean) => {
    if (includeOwn) {
      if (seen.has(pkgDir)) return;
      seen.add(pkgDir);
    }
    const pkg = JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8')) as Record<string, Record<string, string> | undefined>;
    // Optional and peer dependencies absent from the checkout are absent from the copy too, as npm left them.
    for (const name of Object.keys({ ...pkg.dependencies, ...pkg.optionalDependencies, ...pkg.peerDependencies })) {
      const dir = resolvePackageDir(name, pkgDir);
      if (dir) walk(dir, true);
    }
  };
  const own = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
  for (const name of Object.keys(own.dependencies)) {
    if (!resolvePackageDir(name, REPO_ROOT)) throw new Error(`dependency ${name} is not installed: run npm ci`);
  }
  walk(REPO_ROOT, false);
  return [...seen];
}

/**
 * A copy of the CLI that nobody can read and run, wherever the checkout is:
 * under /root (0700, as CI's clone may be) nobody cannot even reach
 * bin/run.js, and an engine run as nobody would die at once with "Cannot
 * find module". bin/, dist/, package.json, the manifest and the runtime
 * packages (about 30 MB, symlinks followed), every directory open to all,
 * nothing writable but by root. The caller removes it.
 */
export function copyCliForNobody(prefix = 'llmgw-cli-nobody-'): string {
  const root = mkdtempSync(join(tmpdir(), prefix));
  const own = ['bin', 'dist', 'package.json', 'oclif.manifest.json'].filter((part) => existsSync(join(REPO_ROOT, part)));
  // A package nested in another's node_modules comes with it.
  const dirs = runtimePackageDirs().map((d) => relative(REPO_ROOT, d));
  const outermost = dirs.filter((d) => !dirs.some((o) => d.startsWith(`${o}/`)));
  // One cp, dereferencing the checkout's node_modules symlink: Node's cpSync took seconds over these files.
  execFileSync('cp', ['-rL', '--parents', '--', ...own, ...outermost, root], { cwd: REPO_ROOT });
  execFileSync('chmod', ['-R', 'a+rX,go-w', root]);
  const bin = join(root, 'bin', 'run.js');
  // A TMPDIR that nobody cannot traverse would fail the test later, and obscurely.
  if (spawnSync('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', 'test', '-r', bin]).status !== 0) {
    throw new Error(`nobody cannot read ${bin}: set TMPDIR to a directory every user can traverse`);
  }
  return root;
}
