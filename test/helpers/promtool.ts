import { execFileSync } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { execa } from 'execa';

/*
 * Debian's promtool (package `prometheus`, /usr/bin/promtool), which the
 * alert-rule and metrics-format tests run. Installed here when missing, as
 * root, from the machine's apt sources; a test that needs it never skips:
 * without it, it fails saying how to get it. On a host whose systemd is PID 1
 * the package's postinst also enables its prometheus service, as any install
 * of it does; in a container (policy-rc.d, no systemd) nothing is started.
 */

export const PROMTOOL = '/usr/bin/promtool';

function present(): boolean {
  try {
    accessSync(PROMTOOL, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** The path of promtool, installed with `apt-get install prometheus` when missing; throws a one-line fix when it cannot be. */
export async function ensurePromtool(): Promise<string> {
  if (present()) return PROMTOOL;
  const how = 'install it: `sudo apt-get update && sudo apt-get install -y prometheus` (Debian/Ubuntu ship promtool in it)';
  if (process.getuid?.() !== 0) throw new Error(`${PROMTOOL} is missing and this test run is not root, so it cannot install it; ${how}`);
  try {
    execFileSync('sh', ['-c', 'command -v apt-get'], { stdio: 'ignore' });
  } catch {
    throw new Error(`${PROMTOOL} is missing and there is no apt-get here; ${how}, or put a promtool at ${PROMTOOL}`);
  }
  // policy-rc.d or not, the package's own service is left alone: only its promtool is wanted.
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  for (const args of [['update', '-qq'], ['install', '-y', '-qq', '--no-install-recommends', 'prometheus']]) {
    const r = await execa('apt-get', args, { reject: false, env, stdin: 'ignore', all: true });
    if (r.exitCode !== 0) throw new Error(`${PROMTOOL} is missing and \`apt-get ${args.join(' ')}\` failed (exit ${r.exitCode}): ${String(r.all).trim().split('\n').slice(-3).join(' | ')}; ${how}`);
  }
  if (!present()) throw new Error(`apt-get installed prometheus but ${PROMTOOL} is still missing; ${how}`);
  return PROMTOOL;
}

/** Runs promtool with `args` (and `input` on stdin); its exit code and combined output. */
export async function promtool(args: string[], input?: string): Promise<{ exitCode: number; output: string }> {
  const r = await execa(PROMTOOL, args, { reject: false, all: true, ...(input === undefined ? { stdin: 'ignore' as const } : { input }) });
  return { exitCode: r.exitCode ?? -1, output: String(r.all ?? '') };
}
