import { chmodSync, chownSync, mkdirSync, readdirSync, statSync } from 'node:fs';
import { basename, dirname } from 'node:path';
import { errnoCode, errorMessage, failure } from '../../lib/errors.js';
import type { Logger } from '../../lib/logger.js';

/** Mode of a socket directory the agent creates: the admin group may reach the socket, others may not even list it. */
export const SOCKET_DIR_MODE = 0o750;

/**
 * Makes sure the socket's directory exists and that members of the admin
 * group can reach the socket in it.
 *
 * A missing directory is created 0750 with the admin group. An existing one
 * is left alone, with one exception: a directory that belongs to the agent's
 * user and lets its group, but not others, through (systemd's
 * RuntimeDirectory=llmgw, mode 0750, root:root) and holds nothing but the
 * socket gets the admin group.
 * Without that, the socket's own 0660 is useless: operators in the group are
 * stopped one level up, with an EACCES that names no group.
 */
export function prepareSocketDir(socketPath: string, gid: number | undefined, log: Logger, othersTraverse = false): string {
  // With admin.read_group, its members (not in the socket's group) must get through to the socket: o+x, never o+r.
  const mode = othersTraverse ? SOCKET_DIR_MODE | 0o001 : SOCKET_DIR_MODE;
  const dir = dirname(socketPath);
  let first: string | undefined;
  try {
    first = mkdirSync(dir, { recursive: true, mode });
  } catch (err) {
    throw failure(`cannot create the admin socket directory ${dir}: ${errorMessage(err)}`);
  }
  try {
    if (first !== undefined) {
      // Every level created here, not only the last: the group must get through all of them.
      for (let d = dir; ; d = dirname(d)) {
        // mkdir's mode passes through the umask; the mode must not depend on it.
        chmodSync(d, mode);
        if (gid !== undefined) chownSync(d, -1, gid);
        if (d === first || d === dirname(d)) break;
      }
      return dir;
    }
    const st = statSync(dir);
    if (othersTraverse && st.uid === process.getuid?.() && (st.mode & 0o001) === 0) {
      // Only a directory of the socket's own, as below.
      if (readdirSync(dir).every((name) => name === basename(socketPath))) {
        chmodSync(dir, (st.mode & 0o777) | 0o001);
        log.info({ dir }, 'let others through the admin socket directory (o+x, not o+r), so admin.read_group members reach the socket');
      } else {
        log.warn({ dir }, 'the admin socket directory holds other files, so admin.read_group members not in its group may not reach the socket; give the socket a directory of its own (/run/llmgw)');
      }
    }
    if (gid === undefined) return dir;
    const ownedByUs = st.uid === process.getuid?.();
    const groupOnly = (st.mode & 0o010) !== 0 && (st.mode & 0o001) === 0;
    if (ownedByUs && groupOnly && st.gid !== gid) {
      // Only a directory of the socket's own: a misplaced admin.socket
      // (/etc/sudoers.d/agent.sock) must not open a directory of other
      // files to the admin group (review finding 13).
      const others = readdirSync(dir).filter((name) => name !== basename(socketPath));
      if (others.length > 0) {
        log.warn(
          { dir, entries: others.slice(0, 5), gid },
          'the admin socket directory holds other files, so its group is left as it is and admin.group members may not reach the socket; give the socket a directory of its own (/run/llmgw)',
        );
        return dir;
      }
      chownSync(dir, -1, gid);
      log.info({ dir, gid }, 'gave the admin socket directory the admin group, so its members can reach the socket');
    }
  } catch (err) {
    if (errnoCode(err) === 'EPERM') throw failure(`cannot give ${dir} the admin group (gid ${gid}): ${errorMessage(err)}; run the agent as root or create ${dir} yourself`);
    throw failure(`cannot prepare the admin socket directory ${dir}: ${errorMessage(err)}`);
  }
  return dir;
}
