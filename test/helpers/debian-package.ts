import { accessSync, constants } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { execa } from 'execa';

/*
 * The tools the suite runs that Debian ships (nft in `nftables`, promtool in
 * `prometheus`): installed here when missing, as root, from the machine's
 * apt sources, so the README's test command does all set-up on a fresh
 * machine. A test that needs one never skips: without it, it fails saying
 * how to get it.
 */

/** Whether `binary` runs here: a path that is executable, or a name on PATH. */
function present(binary: string): boolean {
  try {
    if (binary.includes('/')) accessSync(binary, constants.X_OK);
    else execFileSync('sh', ['-c', 'command -v "$1"', 'sh', binary], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/**
 * Returns once `binary` (a path, or a name looked up on PATH) is here,
 * installing Debian package `pkg` with apt-get when it is missing; throws a
 * one-line fix when it cannot. Installing runs the package's own scripts as
 * any install does (prometheus's postinst enables its service where systemd
 * is PID 1; in a container, policy-rc.d, nothing is started).
 */
export async function ensureDebianPackage(pkg: string, binary: string): Promise<void> {
  if (present(binary)) return;
  const how = `install it: \`sudo apt-get update && sudo apt-get install -y ${pkg}\``;
  if (process.getuid?.() !== 0) throw new Error(`${binary} is missing and this test run is not root, so it cannot install it; ${how}`);
  if (!present('apt-get')) throw new Error(`${binary} is missing and there is no apt-get here; ${how}, or put ${binary} on this machine another way`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  for (const args of [['update', '-qq'], ['install', '-y', '-qq', '--no-install-recommends', pkg]]) {
    const r = await execa('apt-get', args, { reject: false, env, stdin: 'ignore', all: true });
    if (r.exitCode !== 0) throw new Error(`${binary} is missing and \`apt-get ${args.join(' ')}\` failed (exit ${r.exitCode}): ${String(r.all).trim().split('\n').slice(-3).join(' | ')}; ${how}`);
  }
  if (!present(binary)) throw new Error(`apt-get installed ${pkg} but ${binary} is still missing; ${how}`);
}
