import type { LaunchPlan } from '../engines/launch-plan.js';
import { failure } from '../../lib/errors.js';

/** The slice every engine unit is placed in, so operators can see and limit them together. */
export const SYSTEMD_SLICE = 'llmgw.slice';

/**
 * The full unit name of shard `shardId`'s engine, `.service` included: given
 * without its suffix, an id that itself ends in `.service` ("x.service") was
 * taken by systemd-run as the whole name, while the agent asked systemctl
 * about "llmgw-shard-x.service.service" and leaked the unit (finding 15 of
 * the security review). Characters a unit name cannot hold are escaped as
 * systemd-escape does (\xNN); shard ids today hold none (SHARD_ID_PATTERN),
 * so today's names are unchanged and stay what adoption looks for.
 */
export function systemdUnitName(shardId: string): string {
  const escaped = [...shardId].map((ch) => (/^[A-Za-z0-9:_.-]$/.test(ch) ? ch : escapeChar(ch))).join('');
  return `llmgw-shard-${escaped}.service`;
}

function escapeChar(ch: string): string {
  return [...Buffer.from(ch, 'utf8')].map((b) => `\\x${b.toString(16).padStart(2, '0')}`).join('');
}

/**
 * The argv (never a shell string) that runs an engine as a transient systemd
 * service. KillMode=control-group makes systemd kill every process the engine
 * left behind when it stops, even ones that escaped its process group.
 * Output is appended by systemd straight to the shard's log: the agent is not
 * in the log path with this launcher either. --collect unloads a failed unit,
 * so the same shard id can be started again.
 *
 * The environment is NOT on this command line: every local user sees argv
 * in ps, and systemd copies --setenv into the unit's Environment=, which any
 * user can read with `systemctl show`; the engine's secrets (HF_TOKEN) and
 * the agent's own were there (finding 7 of the security review). It goes in
 * `envFile`, root-only (writeEnvironmentFile), which systemd reads.
 */
export function buildSystemdRunArgv(shardId: string, plan: Pick<LaunchPlan, 'argv'>, logPath: string, envFile: string): string[] {
  return [
    'systemd-run',
    '--unit',
    systemdUnitName(shardId),
    '--slice',
    SYSTEMD_SLICE,
    '--collect',
    '--property=KillMode=control-group',
    `--property=StandardOutput=append:${logPath}`,
    `--property=StandardError=append:${logPath}`,
    `--property=EnvironmentFile=${envFile}`,
    '--',
    ...plan.argv,
  ];
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
