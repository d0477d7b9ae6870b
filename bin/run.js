#!/usr/bin/env node

const argv = process.argv.slice(2);
if (argv.length === 1 && argv[0] === '--version') {
  // Fleet checks and scripts run this most; answering from package.json, in
  // oclif's own format, skips loading oclif (most of the start-up time).
  const { readFileSync } = await import('node:fs');
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
  process.stdout.write(`${pkg.name}/${pkg.version} ${process.platform}-${process.arch} node-${process.version}\n`);
} else {
  const { execute, settings } = await import('@oclif/core');
  // This binary always runs the compiled dist/. Without this, oclif looks for
  // TypeScript sources whenever NODE_ENV is "test" or "development" (as it is
  // under vitest) and warns on stderr that it cannot find them.
  settings.enableAutoTranspile = false;
  await execute({ dir: import.meta.url });
}
