#!/usr/bin/env node
// `npm start` after `npm ci` (whose prepare step has just built): build again only when a
// source is newer than the last build, whose final step writes oclif.manifest.json. The
// quick start built twice, 40 s of a newcomer's first minute (walkthrough 3, "next" list).
import { execFileSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const SOURCES = ['src', 'proto', 'scripts/transpile-src.mjs', 'scripts/bundle-agent-run.mjs', 'package.json', 'tsconfig.json', 'tsconfig.build.json'];

/** The newest modification time under `path` (a file, or a directory walked whole); 0 when it is absent. */
function newest(path) {
  let st;
  try {
    st = statSync(path);
  } catch {
    return 0;
  }
  if (!st.isDirectory()) return st.mtimeMs;
  return readdirSync(path).reduce((m, name) => Math.max(m, newest(join(path, name))), st.mtimeMs);
}

const built = newest(join(REPO, 'oclif.manifest.json'));
const changed = Math.max(...SOURCES.map((s) => newest(join(REPO, s))));
if (built === 0 || changed > built) {
  process.stderr.write(built === 0 ? 'building (no build yet)\n' : 'building (sources changed since the last build)\n');
  execFileSync('npm', ['run', 'build'], { cwd: REPO, stdio: 'inherit' });
}
