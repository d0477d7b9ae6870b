import { existsSync, realpathSync, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { configError } from '../errors.js';

const GROUP_OR_OTHER_WRITE = 0o022;
const STICKY = 0o1000;

/**
 * Refuses a directory the agent keeps state, logs or its socket in (`key`
 * names its config key) when someone other than root (or the agent's own
 * user) could change what is in it, in the style of sshd's StrictModes: it
 * and every parent up to / must be owned by root or the agent's user, and
 * not writable by group or others. A parent that is sticky (/tmp, mode
 * 1777) passes: others may create entries there but cannot rename or remove
 * ours. The directory itself gets no such exception.
 *
 * Symlinks are resolved first: their own mode means nothing, and /var/run is
 * one. A directory that does not exist yet is judged by its nearest existing
 * parent, since the agent creates the rest itself.
 *
 * With a log_dir a local user could write to, root truncated and copied an
 * arbitrary file through a planted symlink (finding 9 of the security
 * review); a writable state_dir names pids for root to signal.
 */
export function assertTrustedDirectory(dir: string, key: string, trustedUids: ReadonlySet<number> = defaultTrustedUids()): void {
  const wanted = resolve(dir);
  let existing = wanted;
  while (!existsSync(existing)) existing = dirname(existing);
  const real = realpathSync(existing);
  const itself = existing === wanted;
  for (let d = real; ; d = dirname(d)) {
    const st = statSync(d);
    const fix = `; only root may write there, or choose another ${key}`;
    if (!st.isDirectory()) throw configError(`${key}: ${d} is not a directory`);
    if (!trustedUids.has(st.uid)) throw configError(`${key}: directory ${d} is owned by uid ${st.uid}, not root (chown root ${d})${fix}`);
    const writable = (st.mode & GROUP_OR_OTHER_WRITE) !== 0;
    const exempt = !(itself && d === real) && (st.mode & STICKY) !== 0;
    if (writable && !exempt) {
      throw configError(`${key}: directory ${d} is writable by group or others (mode ${(st.mode & 0o7777).toString(8).padStart(4, '0')}; chmod go-w ${d})${fix}`);
    }
    if (d === dirname(d)) return;
  }
}

/** Root, and the agent's own user when it is not root (tests, a dev cluster). */
function defaultTrustedUids(): ReadonlySet<number> {
  return new Set([0, process.geteuid?.() ?? 0]);
}
