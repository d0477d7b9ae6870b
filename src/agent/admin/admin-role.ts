import { readFileSync } from 'node:fs';
import { createContextKey } from '@connectrpc/connect';
import type { PeerCredentials } from '../../lib/process/peer-credentials.js';

/*
 * Two tiers on the admin socket (security review 4, F8): admin.group may do
 * everything root may through it; admin.read_group (optional) may read
 * everything (status, logs, events, top) and change nothing. Without
 * read_group the socket is 0660 and the file system alone decides who
 * connects, as before: everyone who can is an admin. With it the socket
 * must let the readers connect too (0666), and the agent judges each
 * connection by the groups of the process at the other end.
 */

export type AdminRole = 'admin' | 'read';

/** Who is which, by group id. */
export interface AdminAccess {
  /** admin.group's gid; the agent's own gid when admin.group is empty (the socket's group then). */
  adminGid: number;
  /** admin.read_group's gid; undefined when it is not set. */
  readGid: number | undefined;
  /** Their names, for the messages. */
  adminGroup: string;
  readGroup: string;
  /** Where the peers' groups are read; /proc except in tests. */
  procRoot?: string;
}

/** The caller's tier, for the write gate (admin-write-gate.ts). */
export const ADMIN_ROLE = createContextKey<AdminRole | undefined>(undefined, { description: 'the admin client\'s tier' });

/**
 * The groups of the process at the other end: its gid from SO_PEERCRED and
 * its supplementary groups from /proc/<pid>/status, read while it is still
 * connected (an exit and a reuse of its pid in between is not a case the
 * caller controls: pids are handed out in turn). Where /proc cannot be
 * read (a peer in another pid namespace has pid 0), the gid alone.
 */
export function peerGroups(peer: PeerCredentials, procRoot = '/proc'): number[] {
  const groups = [peer.gid];
  if (peer.pid <= 0) return groups;
  try {
    const status = readFileSync(`${procRoot}/${peer.pid}/status`, 'utf8');
    const uid = /^Uid:\s+(\d+)/m.exec(status)?.[1];
    // The pid names another process now: nothing but the gid is known of the peer.
    if (uid === undefined || Number(uid) !== peer.uid) return groups;
    for (const g of (/^Groups:\s*(.*)$/m.exec(status)?.[1] ?? '').trim().split(/\s+/)) if (/^\d+$/.test(g)) groups.push(Number(g));
  } catch {
    // Gone already: the gid alone.
  }
  return groups;
}

/** The tier of a peer, or undefined when it is in neither group (refused at connect). */
export function roleOf(peer: PeerCredentials, access: AdminAccess | undefined): AdminRole | undefined {
  if (peer.uid === 0 || peer.uid === process.geteuid?.()) return 'admin';
  // No read tier: the socket's mode let it in, so it is an admin (as before).
  if (!access || access.readGid === undefined) return 'admin';
  const groups = peerGroups(peer, access.procRoot);
  if (groups.includes(access.adminGid)) return 'admin';
  if (groups.includes(access.readGid)) return 'read';
  return undefined;
}

/** The one line a connection in neither group is refused with. */
export function notAMember(peer: PeerCredentials, access: AdminAccess): { why: string; action: string } {
  return {
    why: `uid ${peer.uid} is in neither admin.group (${access.adminGroup || `gid ${access.adminGid}`}) nor admin.read_group (${access.readGroup})`,
    action: `ask to be added to ${access.readGroup} to read, or to ${access.adminGroup || 'the admin group'} to operate the node (usermod -aG <group> <user>, then log in again)`,
  };
}
