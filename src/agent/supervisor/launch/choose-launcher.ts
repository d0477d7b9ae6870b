import { existsSync } from 'node:fs';
import type { Launcher, LauncherSetting } from '../../config/agent-config.js';
import { errorMessage } from '../../../lib/errors.js';
import { runSystemctl } from '../../../lib/systemd/run-systemctl.js';

/** The launcher in use and why, logged once when the supervisor starts. */
export interface LauncherChoice {
  launcher: Launcher;
  why: string;
}

/** Where systemd, when it is the running service manager, says so (sd_booted(3)). */
export const SYSTEMD_BOOTED_MARK = '/run/systemd/system';
/** `systemctl is-system-running` answers that mean the manager takes jobs. */
const MANAGER_UP = new Set(['initializing', 'starting', 'running', 'degraded', 'maintenance']);

export interface LauncherProbe {
  booted: () => boolean;
  uid: () => number;
  systemState: () => Promise<string>;
}

const hostProbe: LauncherProbe = {
  booted: () => existsSync(SYSTEMD_BOOTED_MARK),
  uid: () => process.getuid?.() ?? -1,
  systemState: async () => (await runSystemctl(['is-system-running'], { timeoutMs: 5000 })).stdout.trim(),
};

/**
 * `auto` → systemd-run when systemd is the service manager and answers, and
 * the agent is root (transient system units need it); direct otherwise. A
 * configured launcher is used as it is. Never throws: auto falls back to
 * direct with the reason, which the supervisor logs.
 */
export async function chooseLauncher(setting: LauncherSetting, probe: LauncherProbe = hostProbe): Promise<LauncherChoice> {
  if (setting !== 'auto') return { launcher: setting, why: `supervisor.launcher is ${setting}` };
  if (!probe.booted()) {
    return { launcher: 'direct', why: `auto: systemd is not the service manager here (${SYSTEMD_BOOTED_MARK} is missing)` };
  }
  if (probe.uid() !== 0) {
    return { launcher: 'direct', why: 'auto: the agent is not root, and transient system units need root' };
  }
  let state: string;
  try {
    state = await probe.systemState();
  } catch (err) {
    return { launcher: 'direct', why: `auto: systemctl does not answer (${errorMessage(err)})` };
  }
  if (!MANAGER_UP.has(state)) {
    return { launcher: 'direct', why: `auto: systemd is ${JSON.stringify(state || 'silent')}, not taking jobs` };
  }
  return { launcher: 'systemd-run', why: `auto: systemd is PID 1 (${state}) and the agent is root; each engine gets its own unit and cgroup` };
}
