import { accessSync, constants, statSync } from 'node:fs';
import { dirname, relative, sep } from 'node:path';
import { isPermissionDenied } from '../lib/errno.js';
import { LlmgwError } from '../lib/errors.js';
import { findGroup } from '../lib/find-group.js';

/**
 * Exit 77 when `path` (a log under `logDir`) cannot be read because a
 * directory on the way, or the file itself, refuses this user; undefined when
 * nothing refuses (the file is missing, or readable). Without it, `ctl logs`
 * with the agent down said "no log for shard …" about a file that was there:
 * existsSync cannot see through a directory it may not search, and an
 * operator in the admin group went looking for a log that was never lost
 * (new-operator walkthrough 2, row 10).
 *
 * The advice names what would let this user in: `chgrp <group>` when the
 * directory is not the admin group's, `chmod g+rx` when it is but its mode
 * shuts the group out, joining the group when the user is not in it. The
 * group is admin.group from the agent config when ctl read it, else the
 * directory's own group unless that is root (the agent gives its log
 * directory the admin group; root's group is never the one to join).
 */
export function logAccessDenied(path: string, logDir: string, adminGroup?: string): LlmgwError | undefined {
  const denied = firstDenied(path, logDir);
  if (!denied) return undefined;
  return new LlmgwError('permission', `permission denied on ${denied.path} (${accessFix(denied, adminGroup)}, or run as root)`);
}

interface Denied {
  path: string;
  isDirectory: boolean;
  gid?: number;
  mode?: number;
}

/** The outermost of logDir's parents, logDir, the directories below it and the file that refuses us. */
function firstDenied(path: string, logDir: string): Denied | undefined {
  const below = relative(logDir, path);
  const chain = [...parentsOf(logDir), logDir];
  if (!below.startsWith('..')) {
    let at = logDir;
    for (const part of below.split(sep).slice(0, -1)) {
      at = `${at}${sep}${part}`;
      chain.push(at);
    }
  }
  for (const dir of chain) {
    try {
      accessSync(dir, constants.X_OK);
    } catch (err) {
      if (isPermissionDenied(err)) return { path: dir, isDirectory: true, ...owner(dir) };
      // Missing: nothing below it exists either, so nothing is denied.
      return undefined;
    }
  }
  try {
    accessSync(path, constants.R_OK);
  } catch (err) {
    if (isPermissionDenied(err)) return { path, isDirectory: false, ...owner(path) };
  }
  return undefined;
}

function parentsOf(dir: string): string[] {
  const out: string[] = [];
  for (let at = dirname(dir); at !== dirname(at); at = dirname(at)) out.unshift(at);
  return out;
}

function owner(path: string): { gid?: number; mode?: number } {
  try {
    const st = statSync(path);
    return { gid: st.gid, mode: st.mode };
  } catch {
    return {};
  }
}

function accessFix(d: Denied, adminGroup?: string): string {
  const ownGroup = d.gid === undefined ? undefined : findGroup({ gid: d.gid });
  const group = adminGroup ?? (d.gid !== 0 ? ownGroup?.name : undefined);
  const bits = d.isDirectory ? 'g+rx' : 'g+r';
  const need = d.isDirectory ? 0o050 : 0o040;
  const groupBitsOn = d.mode !== undefined && (d.mode & need) === need;
  const chmod = groupBitsOn ? '' : ` and chmod ${bits} it`;
  if (!group) return `chgrp <admin.group> ${d.path}${chmod}, with admin.group from the agent config`;
  if (ownGroup?.name !== group) return `chgrp ${group} ${d.path}${chmod}`;
  if (!groupBitsOn) return `chmod ${bits} ${d.path}`;
  // The group and its bits are right: this user is not in it (or has not logged in again since joining).
  return `join group ${group}: sudo usermod -aG ${group} $USER, then log in again`;
}
