import { systemdUnitName } from '../../lib/systemd/unit-name.js';
import type { LaunchPlan } from '../engines/launch-plan.js';

/** The slice every engine unit is placed in, so operators can see and limit them together. */
export const SYSTEMD_SLICE = 'llmgw.slice';

export { systemdUnitName } from '../../lib/systemd/unit-name.js';

export interface SystemdRunOptions {
  /** Resource properties from supervisor.unit_properties, already checked against the allowlist. */
  properties?: Record<string, string>;
  /** systemd's own stop timeout, a backstop for the agent's stop (which sends SIGKILL itself after the grace). */
  stopGraceMs?: number;
}

/**
 * The argv (never a shell string) that runs an engine as a transient systemd
 * service. KillMode=control-group makes systemd kill every process the engine
 * left behind when it stops, even ones that escaped its process group.
 * Output is appended by systemd straight to the shard's log: the agent is not
 * in the log path with this launcher either.
 *
 * RemainAfterExit=yes and no --collect: the unit, and the exit status
 * systemd recorded for the engine, stay loaded after the engine ends until
 * the agent has read them; a collected unit vanished with its status, and
 * an engine that died while the agent was down could only be reported as
 * "gone". The agent unloads it once the status is reported (forgetUnit).
 */
export function buildSystemdRunArgv(shardId: string, plan: LaunchPlan, logPath: string, opts: SystemdRunOptions = {}): string[] {
  const setenv = Object.entries(plan.env).map(([k, v]) => `--setenv=${k}=${v}`);
  const properties = Object.entries(opts.properties ?? {}).map(([k, v]) => `--property=${k}=${v}`);
  return [
    'systemd-run',
    '--unit',
    systemdUnitName(shardId),
    '--slice',
    SYSTEMD_SLICE,
    '--property=KillMode=control-group',
    '--property=RemainAfterExit=yes',
    ...(opts.stopGraceMs === undefined ? [] : [`--property=TimeoutStopSec=${Math.ceil(opts.stopGraceMs)}ms`]),
    `--property=StandardOutput=append:${logPath}`,
    `--property=StandardError=append:${logPath}`,
    ...properties,
    ...setenv,
    '--',
    ...plan.argv,
  ];
}
