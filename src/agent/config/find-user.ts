import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { errnoCode } from '../../lib/errno.js';
import type { EngineUser } from './agent-config.js';

export const ETC_PASSWD = '/etc/passwd';

/** getent answers from NSS in milliseconds; a hung LDAP must not hang the agent's start for longer. */
const GETENT_TIMEOUT_MS = 5000;

function parsePasswdLine(line: string): EngineUser | undefined {
  const [name = '', , uidText = '', gidText = '', , home = '/'] = line.split(':');
  const uid = Number(uidText);
  const gid = Number(gidText);
  if (name === '' || uidText === '' || gidText === '' || !Number.isInteger(uid) || !Number.isInteger(gid)) return undefined;
  return { name, uid, gid, home: home || '/' };
}

/**
 * An account by name, with its uid and primary gid. Asks `getent passwd`
 * first, so accounts from LDAP or sssd (usual on fleets) are found; reads
 * /etc/passwd itself only where getent does not exist. Undefined when the
 * account does not exist.
 */
export function findUser(name: string, passwdPath: string = ETC_PASSWD): EngineUser | undefined {
  try {
    const out = execFileSync('getent', ['passwd', name], { encoding: 'utf8', timeout: GETENT_TIMEOUT_MS, stdio: ['ignore', 'pipe', 'ignore'] });
    const user = parsePasswdLine(out.trim().split('\n')[0] ?? '');
    // getent also answers a numeric query by uid; the config names an account.
    return user?.name === name ? user : undefined;
  } catch (err) {
    // Exit 2 is getent's "not found"; only a missing getent falls back to the file.
    if (errnoCode(err) !== 'ENOENT') return undefined;
  }
  let text: string;
  try {
    text = readFileSync(passwdPath, 'utf8');
  } catch {
    return undefined;
  }
  for (const line of text.split('\n')) {
    const user = parsePasswdLine(line);
    if (user?.name === name) return user;
  }
  return undefined;
}
