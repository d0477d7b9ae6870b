import { execa } from 'execa';
import { ensureDebianPackage } from './debian-package.js';

/*
 * Debian's promtool (package `prometheus`, /usr/bin/promtool), which the
 * alert-rule and metrics-format tests run: installed when missing
 * (ensureDebianPackage); on a host whose systemd is PID 1 the package's
 * postinst also enables its prometheus service, as any install of it does.
 */

export const PROMTOOL = '/usr/bin/promtool';

/** The path of promtool, installed with `apt-get install prometheus` when missing; throws a one-line fix when it cannot be. */
export async function ensurePromtool(): Promise<string> {
  await ensureDebianPackage('prometheus', PROMTOOL);
  return PROMTOOL;
}

/** Runs promtool with `args` (and `input` on stdin); its exit code and combined output. */
export async function promtool(args: string[], input?: string): Promise<{ exitCode: number; output: string }> {
  const r = await execa(PROMTOOL, args, { reject: false, all: true, ...(input === undefined ? { stdin: 'ignore' as const } : { input }) });
  return { exitCode: r.exitCode ?? -1, output: String(r.all ?? '') };
}
