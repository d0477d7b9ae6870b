import { readFileSync } from 'node:fs';
import type { LoadConfigOptions } from '../agent/config/load-agent-config.js';
import { LOG_LEVELS } from '../lib/log-levels.js';
import { errorLine, errorReport } from './error-report.js';

/**
 * The `agent run` flags that override one configuration key each, and that
 * key: the oclif command (src/commands/agent/run.ts) and the path without
 * oclif read the same table, so an override cannot mean two things.
 */
export const AGENT_RUN_OVERRIDES = {
  'node-id': 'node_id',
  server: 'server',
  protocol: 'protocol',
  'state-dir': 'supervisor.state_dir',
  'log-dir': 'supervisor.log_dir',
  socket: 'admin.socket',
  'heartbeat-interval': 'heartbeat_interval',
  'metrics-addr': 'metrics_addr',
  'nvidia-smi': 'discovery.nvidia_smi',
  'sysfs-root': 'discovery.sysfs_root',
} as const;

export type AgentRunOverride = keyof typeof AGENT_RUN_OVERRIDES;

/**
 * Everything `agent run` does once its command line is parsed: load the
 * configuration, make the logger, run the agent until SIGTERM. Both the oclif
 * command and fastAgentRun call it. The parts are imported here, not at the
 * top, so that a command line handed on to oclif has not paid for them.
 */
export async function startAgent(options: LoadConfigOptions, version: string): Promise<void> {
  const { loadAgentConfig } = await import('../agent/config/load-agent-config.js');
  const { config } = loadAgentConfig(options);
  const { createLogger } = await import('../lib/logger.js');
  const logger = await createLogger({ level: config.logLevel as 'info', name: 'llmgw-agent' });
  // A misspelt LLMGW_* variable is otherwise ignored without a word.
  const { describeMisspeltEnv, misspeltEnvNames } = await import('../agent/config/misspelt-env-names.js');
  for (const m of misspeltEnvNames(options.env ?? process.env)) logger.warn({ env: m.name, meant: m.meant }, describeMisspeltEnv(m));
  const { runAgent } = await import('../agent/run-agent.js');
  await runAgent({ config, version, logger });
}

/**
 * `llmgw agent run` without loading oclif and its own dependencies (semver,
 * minimatch, ejs, string-width: about a quarter of a second of a cold start
 * on a loaded node), since every second before Register is capacity the
 * control plane cannot place. `args` is the command line after `agent run`.
 * Only the forms systemd and scripts use are answered here: `--config X` /
 * `-c X` and the override flags, each once with a value. Anything else
 * (help, --print-config, --json, --log-level, an unknown flag, an argument)
 * returns false without doing anything, and bin/run.js hands the command
 * line to oclif.
 *
 * On an error the report is BaseCommand's (errorReport, errorLine, the exit
 * status of the error's kind), so the two paths cannot be told apart. When
 * the agent has stopped the process exits 0 at once, as the oclif command
 * does: leftover HTTP/2 sessions must not hold it open past an orderly stop.
 *
 * Nothing here may import @oclif/core, even indirectly (base-command.ts does).
 */
export async function fastAgentRun(args: readonly string[], env: NodeJS.ProcessEnv = process.env): Promise<boolean> {
  const plain = plainInvocation(args, env);
  if (!plain) return false;
  try {
    const flags: Record<string, string | undefined> = {};
    for (const [flag, key] of Object.entries(AGENT_RUN_OVERRIDES)) flags[key] = plain.overrides.get(flag as AgentRunOverride);
    // As oclif's --log-level does with its env: LLMGW_LOG_LEVEL, checked above.
    flags.log_level = env.LLMGW_LOG_LEVEL;
    await startAgent({ configPath: plain.configPath, flags }, packageVersion());
  } catch (err) {
    const report = errorReport(err, env);
    process.stderr.write(errorLine(report, env));
    // Logs and the error line are written synchronously: nothing is cut off.
    process.exit(report.exitCode);
  }
  process.exit(0);
}

/** The version oclif reports as config.version: package.json's. */
function packageVersion(): string {
  return JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')).version;
}

interface PlainInvocation {
  /** --config / -c, else a non-empty LLMGW_CONFIG (the flag's env, as oclif reads it). */
  configPath?: string;
  overrides: Map<AgentRunOverride, string>;
}

/**
 * The invocation when it is made only of `--config X|=X`, `-c X` and the
 * override flags (`--name X|=X`), each at most once and with a value. Left to
 * oclif: anything else, and an environment oclif reads differently
 * (LLMGW_CONTENT_TYPE, its switch to JSON output; a LLMGW_LOG_LEVEL it would
 * reject; an empty LLMGW_CONFIG).
 */
function plainInvocation(args: readonly string[], env: NodeJS.ProcessEnv): PlainInvocation | undefined {
  if (env.LLMGW_CONTENT_TYPE !== undefined || env.LLMGW_CONFIG === '') return undefined;
  if (env.LLMGW_LOG_LEVEL !== undefined && !(LOG_LEVELS as readonly string[]).includes(env.LLMGW_LOG_LEVEL)) return undefined;
  const given = new Map<string, string>();
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string;
    const eq = arg.startsWith('--') ? arg.indexOf('=') : -1;
    let name = eq === -1 ? arg : arg.slice(0, eq);
    if (name === '-c') {
      // -c=X and -cX mean other things to oclif than they seem: left to it.
      name = '--config';
    } else if (!name.startsWith('--') || !(name === '--config' || Object.hasOwn(AGENT_RUN_OVERRIDES, name.slice(2)))) {
      return undefined;
    }
    const value = (eq === -1 ? args[++i] : arg.slice(eq + 1)) ?? '';
    // oclif refuses a missing value or reads an empty one as none, and takes
    // a separate value that starts with "-" for the next flag.
    if (value === '' || (eq === -1 && value.startsWith('-'))) return undefined;
    if (given.has(name)) return undefined;
    given.set(name, value);
  }
  const overrides = new Map<AgentRunOverride, string>();
  for (const [name, value] of given) if (name !== '--config') overrides.set(name.slice(2) as AgentRunOverride, value);
  return { configPath: given.get('--config') ?? env.LLMGW_CONFIG, overrides };
}
