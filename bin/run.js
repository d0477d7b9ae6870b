#!/usr/bin/env node

// Fleet checks, operators and monitoring scripts run `--version` and
// `ctl status` most, and systemd runs `agent run`, whose start-up is time
// before Register that the control plane cannot place replicas on the node.
// Loading oclif is most of a command's start-up time, so these are answered
// without it when they can be; the rest goes to oclif.
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
    // Bundled into one file, as agent run is (scripts/bundle-agent-run.mjs).
    const { fastCtlStatus } = await import('../dist/ctl-status.bundle.js');
    return fastCtlStatus(argv.slice(2));
  }
  if (argv[0] === 'sim' && argv[1] === 'engine') {
    // Started by the agent for every sim shard: reading its flags with oclif
    // cost three times the rest of its start (src/cli/fast-sim-engine.ts).
    // False for help and anything it does not read exactly as oclif would.
    const { fastSimEngine } = await import('../dist/cli/fast-sim-engine.js');
    return fastSimEngine(argv.slice(2));
  }
  if (argv[0] === 'agent' && argv[1] === 'run') {
    // No TurboFan for the agent, which lives for months doing little: its
    // optimized code and the compiler's own memory were most of the agent's
    // growth to 96 MB RSS under fast heartbeats, against a flat 70 MB without,
    // for no CPU measured (bench/RESULTS.md, figure 5). V8 refuses --no-opt
    // in NODE_OPTIONS, and the unit's ExecStart is written by `agent
    // install-unit`: set here, before the agent's code is loaded, it holds
    // wherever `agent run` is started. Engines never inherit it.
    (await import('node:v8')).setFlagsFromString('--no-opt');
    // Only the forms systemd and scripts use (--config and the override
    // flags); false for help, --print-config, --json, --log-level and errors.
    // From one bundled file (scripts/bundle-agent-run.mjs, part of `npm run
    // build`): loading the agent's ~300 modules one by one cost more than
    // everything else before Register.
    const { fastAgentRun } = await import('../dist/agent-run.bundle.js');
    return fastAgentRun(argv.slice(2));
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
