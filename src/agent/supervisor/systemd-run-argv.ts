import type { LaunchPlan } from '../engines/launch-plan.js';

/** The slice every engine unit is placed in, so operators can see and limit them together. */
export const SYSTEMD_SLICE = 'llmgw.slice';

export const systemdUnitName = (shardId: string) => `llmgw-shard-${shardId}`;

/**
 * The argv (never a shell string) that runs an engine as a transient systemd
 * service. KillMode=control-group makes systemd kill every process the engine
 * left behind when it stops, even ones that escaped its process group.
 * Output is appended by systemd straight to the shard's log: the agent is not
 * in the log path with this launcher either. --collect unloads a failed unit,
 * so the same shard id can be started again.
 */
export function buildSystemdRunArgv(shardId: string, plan: LaunchPlan, logPath: string): string[] {
  const setenv = Object.entries(plan.env).map(([k, v]) => `--setenv=${k}=${v}`);
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
    ...setenv,
    '--',
    ...plan.argv,
  ];
}
