import { parseArgs } from 'node:util';
import { parseDuration } from '../lib/duration.js';
import { SIM_DEFAULTS, type SimEngineOptions } from '../sim/sim-engine-options.js';

/*
 * `llmgw sim engine` without oclif, for bin/run.js: the agent under test
 * starts one of these for every sim shard, and loading oclif to parse its
 * flags cost 360 ms of CPU per start against ~100 ms without (2026-12-06, 2
 * cores): most of the test suite's CPU went to it. Only a command line this
 * parser reads exactly as src/commands/sim/engine.ts's flags would is taken;
 * anything else (help, an unknown or bad flag) goes to oclif, which says
 * what is wrong as every other command does.
 */

const DURATIONS = ['load-time', 'token-latency', 'fail-after', 'hang-after', 'stall-after'] as const;
const INTEGERS = ['port', 'max-tokens', 'exit-code', 'log-rate'] as const;
const BOOLEANS = ['never-ready', 'ignore-sigterm', 'spawn-escaping-child', 'spawn-child', 'fragile-worker', 'worker'] as const;
const INTEGER_RANGE: Record<(typeof INTEGERS)[number], [number, number]> = {
  port: [0, 65535],
  'max-tokens': [0, Number.MAX_SAFE_INTEGER],
  'exit-code': [0, 255],
  'log-rate': [1, Number.MAX_SAFE_INTEGER],
};

type Values = Record<string, string | boolean | string[] | undefined>;

/** The options this command line means, or undefined when oclif should read it. */
export function simEngineOptions(argv: string[]): SimEngineOptions | undefined {
  let values: Values;
  try {
    ({ values } = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: {
        host: { type: 'string', multiple: true },
        model: { type: 'string' },
        rendezvous: { type: 'string' },
        'load-until-file': { type: 'string' },
        ...Object.fromEntries([...DURATIONS, ...INTEGERS].map((n) => [n, { type: 'string' as const }])),
        ...Object.fromEntries(BOOLEANS.map((n) => [n, { type: 'boolean' as const }])),
      },
    }) as { values: Values });
  } catch {
    return undefined;
  }
  const ms: Partial<Record<(typeof DURATIONS)[number], number>> = {};
  for (const name of DURATIONS) {
    const text = values[name];
    if (text === undefined) continue;
    const v = parseDuration(text as string);
    if (v === undefined) return undefined;
    ms[name] = v;
  }
  const int: Partial<Record<(typeof INTEGERS)[number], number>> = {};
  for (const name of INTEGERS) {
    const text = values[name];
    if (text === undefined) continue;
    if (!/^\d+$/.test(text as string)) return undefined;
    const v = Number(text);
    const [lo, hi] = INTEGER_RANGE[name];
    if (v < lo || v > hi) return undefined;
    int[name] = v;
  }
  const flag = (name: (typeof BOOLEANS)[number]) => values[name] === true;
  if (flag('fragile-worker') && !flag('spawn-child')) return undefined;
  const opts: SimEngineOptions = {
    host: (values.host as string[] | undefined)?.at(-1) ?? SIM_DEFAULTS.host,
    port: int.port ?? SIM_DEFAULTS.port,
    model: (values.model as string | undefined) ?? SIM_DEFAULTS.model,
    loadTimeMs: ms['load-time'] ?? SIM_DEFAULTS.loadTimeMs,
    tokenLatencyMs: ms['token-latency'] ?? SIM_DEFAULTS.tokenLatencyMs,
    maxTokens: int['max-tokens'] ?? SIM_DEFAULTS.maxTokens,
    exitCode: int['exit-code'] ?? SIM_DEFAULTS.exitCode,
    neverReady: flag('never-ready'),
    ignoreSigterm: flag('ignore-sigterm'),
    spawnChild: flag('spawn-child'),
    fragileWorker: flag('fragile-worker'),
    spawnEscapingChild: flag('spawn-escaping-child'),
    worker: flag('worker'),
  };
  if (ms['fail-after'] !== undefined) opts.failAfterMs = ms['fail-after'];
  if (ms['hang-after'] !== undefined) opts.hangAfterMs = ms['hang-after'];
  if (ms['stall-after'] !== undefined) opts.stallAfterMs = ms['stall-after'];
  if (int['log-rate'] !== undefined) opts.logRate = int['log-rate'];
  if (values.rendezvous !== undefined) opts.rendezvous = values.rendezvous as string;
  if (values['load-until-file'] !== undefined) opts.loadUntilFile = values['load-until-file'] as string;
  return opts;
}

/** Runs the sim engine when oclif is not needed to read `argv`; false when it is. */
export async function fastSimEngine(argv: string[]): Promise<boolean> {
  const opts = simEngineOptions(argv);
  if (!opts) return false;
  const { runSimEngine } = await import('../sim/sim-engine.js');
  let code: number;
  try {
    code = await runSimEngine(opts);
  } catch (err) {
    const { errorLine, errorReport } = await import('./error-report.js');
    const report = errorReport(err);
    process.stderr.write(errorLine(report, process.env, { ownText: false }));
    code = report.exitCode;
  }
  // As the oclif command does: a crash simulated with --fail-after exits even with requests open.
  process.exit(code);
}
