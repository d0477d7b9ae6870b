import { readFileSync } from 'node:fs';

export const ETC_GROUP = '/etc/group';

export interface UnixGroup {
  name: string;
  gid: number;
  /** Supplementary members listed in the file (not users whose primary group it is). */
  members: string[];
}

/**
 * A group by name or by gid, from /etc/group. Node has no getgrnam, and the
 * agent needs one only for the admin socket's group (named in config) and
 * ctl needs one only to name that group in an error; groups that come from
 * LDAP or sssd alone are not found, which the caller reports as unknown.
 */
export function findGroup(query: { name: string } | { gid: number }, path: string = ETC_GROUP): UnixGroup | undefined {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const [name = '', , gidText = '', members = ''] = line.split(':');
    const gid = Number(gidText);
    if (name === '' || gidText === '' || !Number.isInteger(gid)) continue;
    const hit = 'name' in query ? name === query.name : gid === query.gid;
    if (hit) return { name, gid, members: members === '' ? [] : members.split(',') };
  }
  return undefined;
}
