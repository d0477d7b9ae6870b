#!/usr/bin/env node
/**
 * Emits dist/ from src/: each .ts file transpiled on its own by esbuild into
 * the .js (and source map) tsc would write at the same path. Type checking
 * is `npm run typecheck` (tsc --noEmit over src, test and bench), which
 * `npm test` runs; `isolatedModules` in tsconfig.json makes tsc refuse what
 * a file-by-file transpiler could get wrong (a type re-exported as a value).
 * tsc emitting dist/ checked src a second time: 20 s of CPU on this 2-core
 * machine, 50 s of wall time while other work ran, in every `npm test`.
 */
import { readdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** Every .ts file under `dir`, declarations left out. */
function sources(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sources(path);
    return e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') ? [path] : [];
  });
}

await build({
  entryPoints: sources(join(REPO, 'src')),
  outbase: join(REPO, 'src'),
  outdir: join(REPO, 'dist'),
  format: 'esm',
  platform: 'node',
  target: 'node20',
  sourcemap: true,
  bundle: false,
  logLevel: 'warning',
  tsconfig: join(REPO, 'tsconfig.build.json'),
});
