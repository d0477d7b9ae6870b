import { chmodSync, lstatSync, mkdirSync, readlinkSync, type Stats } from 'node:fs';
import { join, resolve } from 'node:path';
import { isNotFound } from '../errno.js';
import { configError } from '../errors.js';

const GROUP_OR_OTHER_WRITE = 0o022;
const STICKY = 0o1000;
/** Links followed in one path, at most (the kernel's own limit is 40). */
const MAX_LINKS = 40;

/**
 * Refuses a directory the agent keeps state, logs, its socket or the model
 * store in (`key` names its config key) when someone other than root (or
 * the agent's own user) could change what is in it, or what the path leads
 * to, in the style of sshd's StrictModes and systemd's unsafe-transition
 * rule. The path is walked as written, one component at a time, each one
 * lstat'ed, from /:
 *
 * - every directory on the way must be owned by root or the agent's user
 *   and not writable by group or others; a parent (never the directory
 *   itself) that is sticky and owned by root passes (/tmp, 1777): others
 *   may create entries there but cannot rename or remove ours;
 * - a symbolic link on the way must be owned by root or the agent's user
 *   (the folder holding it is judged like any other), and what it points at
 *   is walked the same way. A root link in a folder a group may write was
 *   replaced by a member's link to a store of its own (security review 4,
 *   F3, variant B).
 *
 * A directory that does not exist yet is judged by its nearest existing
 * parent when only judging (`--print-config`). With `createMode` (the
 * agent's start, each pull) the agent makes each missing folder itself,
 * one mkdir at a time (never `mkdir -p` through other people's folders),
 * and judges what it finds there after: a name another user took first is
 * theirs and refused. Before, a `cache_dir` under a sticky folder that did
 * not exist yet passed, a local user made it, and root wrote a cron file
 * through a link planted in it (F3, variant A).
 *
 * With a log_dir a local user could write to, root truncated and copied an
 * arbitrary file through a planted symlink (finding 9 of the security
 * review); a writable state_dir names pids for root to signal.
 */
export function assertTrustedDirectory(dir: string, key: string, trustedUids: ReadonlySet<number> = defaultTrustedUids(), createMode?: number): void {
  walk(resolve(dir), true, { key, trustedUids, createMode, links: 0 });
}

/** assertTrustedDirectory that makes what is missing (mode `mode`, the agent's), for where the agent writes next. */
export function makeTrustedDirectory(dir: string, key: string, mode = 0o755, trustedUids: ReadonlySet<number> = defaultTrustedUids()): void {
  assertTrustedDirectory(dir, key, trustedUids, mode);
}

interface Walk {
  key: string;
  trustedUids: ReadonlySet<number>;
  createMode: number | undefined;
  links: number;
}

/** Walks the absolute path `path`; returns the directory it leads to, or undefined where it stops existing (judging only). */
function walk(path: string, final: boolean, w: Walk): string | undefined {
  const parts = path.split('/').filter((p) => p !== '');
  let cur = '/';
  judge(cur, lstatSync(cur), final && parts.length === 0, w);
  for (let i = 0; i < parts.length; i++) {
    const last = final && i === parts.length - 1;
    const p = join(cur, parts[i] as string);
    let st = lstatOrUndefined(p);
    if (st === undefined) {
      if (w.createMode === undefined) return undefined; // the agent makes the rest itself, and judges it then
      try {
        // Folders on the way 0755 (engines and the admin group pass through them); the directory itself its own
        // mode, whatever the umask (the parent was just judged: no one else can rename or replace what is made here).
        const mode = last ? w.createMode : 0o755;
        mkdirSync(p, { mode });
        chmodSync(p, mode);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw configError(`${w.key}: cannot create ${p}: ${(err as Error).message}; create it (owned by root, mode 0755) or choose another ${w.key}`);
      }
      st = lstatSync(p);
    }
    if (st.isSymbolicLink()) {
      if (!w.trustedUids.has(st.uid)) {
        throw configError(`${w.key}: ${p} is a symbolic link owned by uid ${st.uid}, who may point it anywhere; only root may own links on the way, or choose another ${w.key}`);
      }
      if (++w.links > MAX_LINKS) throw configError(`${w.key}: more than ${MAX_LINKS} symbolic links on the way to ${path}; choose another ${w.key}`);
      const target = walk(resolve(cur, readlinkSync(p)), last, w);
      if (target === undefined) return undefined;
      cur = target;
      continue;
    }
    judge(p, st, last, w);
    cur = p;
  }
  return cur;
}

function judge(d: string, st: Stats, itself: boolean, w: Walk): void {
  const fix = `; only root may write there, or choose another ${w.key}`;
  if (!st.isDirectory()) throw configError(`${w.key}: ${d} is not a directory`);
  if (!w.trustedUids.has(st.uid)) throw configError(`${w.key}: directory ${d} is owned by uid ${st.uid}, not root (chown root ${d})${fix}`);
  const writable = (st.mode & GROUP_OR_OTHER_WRITE) !== 0;
  const exempt = !itself && (st.mode & STICKY) !== 0;
  if (writable && !exempt) {
    throw configError(`${w.key}: directory ${d} is writable by group or others (mode ${(st.mode & 0o7777).toString(8).padStart(4, '0')}; chmod go-w ${d})${fix}`);
  }
}

function lstatOrUndefined(p: string): Stats | undefined {
  try {
    return lstatSync(p);
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

/** Root, and the agent's own user when it is not root (tests, a dev cluster). */
export function defaultTrustedUids(): ReadonlySet<number> {
  return new Set([0, process.geteuid?.() ?? 0]);
}
