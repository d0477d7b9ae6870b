import { systemdUnitName } from '../../../lib/systemd/unit-name.js';
import { failure } from '../../../lib/errors.js';
import type { LaunchPlan } from '../../engines/launch-plan.js';

/** The slice every engine unit is placed in, so operators can see and limit them together. */
export const SYSTEMD_SLICE = 'llmgw.slice';

export interface SystemdRunOptions {
  /** Resource properties from supervisor.unit_properties, already checked against the allowlist. */
  properties?: Record<string, string>;
  /** systemd's own stop timeout, a backstop for the agent's stop (which sends SIGKILL itself after the grace). */
  stopGraceMs?: number;
}

/**
 * The argv (never a shell string) that runs an engine as a transient systemd
 * service. KillMode=mixed: a stop SIGTERMs the main process alone, which
 * drains and ends its own workers, then SIGKILLs whatever is left of the
 * cgroup, even processes that escaped the engine's process group. So an
 * operator's `systemctl stop llmgw-shard-<id>` drains as the agent's stop
 * does. control-group (which this was) SIGTERMs every worker with the
 * engine: vLLM's workers exit on it and fail the engine, SGLang's schedulers
 * die on it, and the in-flight requests are aborted (review engine-fidelity
 * §0 #2). The agent's own stop does not depend on it (stopEngineUnit).
 * Output is appended by systemd straight to the shard's log: the agent is not
 * in the log path with this launcher either.
 *
 * RemainAfterExit=yes and no --collect: the unit, and the exit status
 * systemd recorded for the engine, stay loaded after the engine ends until
 * the agent has read them; a collected unit vanished with its status, and
 * an engine that died while the agent was down could only be reported as
 * "gone". The agent unloads it once the status is reported (forgetUnit).
 *
 * The environment is NOT on this command line: every local user sees argv
 * in ps, and systemd copies --setenv into the unit's Environment=, which any
 * user can read with `systemctl show`; the engine's secrets (HF_TOKEN) and
 * the agent's own were there (finding 7 of the security review). It goes in
 * `envFile`, root-only (writeEnvironmentFile), which systemd reads.
 *
 * The engine's arguments are escaped for systemd (literalForSystemd): they
 * reach the engine byte for byte, as under the direct launcher.
 */
export function buildSystemdRunArgv(shardId: string, plan: Pick<LaunchPlan, 'argv'>, logPath: string, envFile: string, opts: SystemdRunOptions = {}): string[] {
  const properties = Object.entries(opts.properties ?? {}).map(([k, v]) => `--property=${k}=${v}`);
  return [
    'systemd-run',
    '--unit',
    systemdUnitName(shardId),
    '--slice',
    SYSTEMD_SLICE,
    '--property=KillMode=mixed',
    '--property=RemainAfterExit=yes',
    ...(opts.stopGraceMs === undefined ? [] : [`--property=TimeoutStopSec=${Math.ceil(opts.stopGraceMs)}ms`]),
    `--property=StandardOutput=append:${logPath}`,
    `--property=StandardError=append:${logPath}`,
    ...properties,
    `--property=EnvironmentFile=${envFile}`,
    '--',
    ...literalCommand(plan.argv),
  ];
}

/**
 * `argv` with every argument after the executable made literal for systemd.
 * The executable is left as it is: systemd-run looks it up as a file before
 * systemd sees it ("Failed to find executable /a$$b/sh" when escaped), and it
 * is the operator's engines.<name>.command, never the control plane's.
 */
function literalCommand(argv: readonly string[]): string[] {
  const [exe, ...args] = argv;
  return exe === undefined ? [] : [exe, ...args.map(literalForSystemd)];
}

/**
 * `arg` with each `$` doubled. systemd substitutes `${VAR}` (and a whole-word
 * `$VAR`) in ExecStart= arguments at exec time, from the unit's environment,
 * which holds the operator's engines.<name>.env from the EnvironmentFile, and
 * turns `$$` into `$` (systemd.service(5), "Command lines"). So a profile arg
 * `${HF_TOKEN}` became the operator's secret on the engine's world-readable
 * command line and in the log tail the control plane receives, and `$$` in a
 * JSON `--hf-overrides` lost a byte (security review 2, finding N4). systemd
 * 252 has no systemd-run --expand-environment=no (254), and takes the
 * ExecStart= `:` prefix (no expansion) only in a unit file, not in
 * systemd-run's command. `%` is left alone: systemd-run hands the command
 * over D-Bus, where specifiers are not expanded (`%n` and `%%` reached the
 * engine unchanged in the lab, so `%%` for `%` would arrive doubled;
 * test/systemd/engine-argv-expansion.test.ts). The transient unit file
 * systemd writes holds `\$\$` and `%%`, so a daemon-reload keeps the bytes.
 */
export function literalForSystemd(arg: string): string {
  return arg.replace(/\$/g, () => '$$');
}

/** What a systemd EnvironmentFile= name may be. */
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * The text of a systemd EnvironmentFile= for `env`: one KEY="value" a line,
 * with the four characters systemd unescapes inside double quotes (\ " ` $)
 * escaped. A line break or NUL cannot be carried, and is refused naming the
 * variable, never showing its value (it may be a secret).
 */
export function environmentFileText(env: Record<string, string>): string {
  const lines: string[] = [];
  for (const [key, value] of Object.entries(env)) {
    if (!ENV_NAME.test(key)) throw failure(`environment variable ${JSON.stringify(key.slice(0, 64))} is not a valid name for a systemd unit; refused`);
    if (/[\n\r\0]/.test(value)) throw failure(`environment variable ${key} holds a line break or NUL, which a systemd unit cannot be given; refused`);
    lines.push(`${key}="${value.replace(/[\\"`$]/g, (c) => `\\${c}`)}"`);
  }
  return lines.length > 0 ? `${lines.join('\n')}\n` : '';
}
