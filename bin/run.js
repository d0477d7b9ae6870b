#!/usr/bin/env node

// Fleet checks, operators and monitoring scripts run `--version` and
// `ctl status` most. Loading oclif is most of a command's start-up time, so
// these are answered without it when they can be; the rest goes to oclif.
const argv = process.argv.slice(2);

async function answeredWithoutOclif() {
  if (argv.length === 1 && argv[0] === '--version') {
    // From package.json, in oclif's own format.
    const { readFileSync } = await import('node:fs');
    const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
    process.stdout.write(`${pkg.name}/${pkg.version} ${process.platform}-${process.arch} node-${process.version}\n`);
    return true;
  }
  if (argv[0] === 'ctl' && argv[1] === 'status') {
    // Only the plain forms (--json, --socket, --config); false for help, errors and the rest.
    const { fastCtlStatus } = await import('../dist/cli/fast-ctl-status.js');
    return fastCtlStatus(argv.slice(2));
  }
  return false;
}

if (!(await answeredWithoutOclif())) {
  const { Config, flush, handle, run, settings } = await import('@oclif/core');
  // This binary always runs the compiled dist/. Without this, oclif looks for
  // TypeScript sources whenever NODE_ENV is "test" or "development" (as it is
  // under vitest) and warns on stderr that it cannot find them.
  settings.enableAutoTranspile = false;
  try {
    await run(argv, import.meta.url);
    await flush();
  } catch (err) {
    // oclif reports an unknown command in its own boxed style; say it as every
    // other llmgw error is said, with a suggestion, exit 2 (usage).
    const unknown = /^command (\S+) not found$/.exec(err instanceof Error ? err.message : '');
    if (!unknown) await handle(err);
    else {
      const { commandNotFoundMessage } = await import('../dist/cli/command-not-found.js');
      const config = await Config.load(import.meta.url);
      process.stderr.write(`error: ${commandNotFoundMessage(unknown[1], config.commandIDs)}\n`);
      process.exitCode = 2;
    }
  }
}
