import { join } from 'node:path';
import { unlink } from 'node:fs/promises';
import { errnoCode } from '../lib/errno.js';
import { errorMessage } from '../lib/errors.js';
import { openRegularFile } from '../lib/files/open-regular-file.js';
import { writeFileAtomic } from '../lib/write-file-atomic.js';

/** A cordon as it is kept on disk: who, when and why. */
export interface CordonRecord {
  reason: string;
  sinceMs: number;
  /** The admin client's uid (SO_PEERCRED); -1 when it could not be read. */
  byUid: number;
}

/** Bumped on an incompatible change; a file of another version is read as corrupt (cordoned, see readCordonFile). */
const CORDON_FILE_VERSION = 1;
/** An operator's reason, one line: it is repeated in every refused start and in the control plane's view. */
export const MAX_CORDON_REASON_CHARS = 200;
/** A valid file is well under this; anything bigger was not written by an agent. */
const MAX_CORDON_FILE_BYTES = 4096;

/** <state_dir>/cordon.json: next to shards/, not in it, so no shard scan ever reads it. */
export const cordonFilePath = (stateDir: string): string => join(stateDir, 'cordon.json');

/** Why `reason` cannot be a cordon's reason; undefined when it can. */
export function cordonReasonProblem(reason: string): string | undefined {
  if (reason.length > MAX_CORDON_REASON_CHARS) return `the reason is ${reason.length} characters; at most ${MAX_CORDON_REASON_CHARS}`;
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is refused
  if (/[\u0000-\u001f\u007f]/.test(reason)) return 'the reason must be one line of text (no newline or control character)';
  return undefined;
}

/** What the file says: not cordoned (no file), cordoned, or a file that cannot be trusted. */
export type CordonFileRead = { kind: 'none' } | { kind: 'cordoned'; record: CordonRecord } | { kind: 'corrupt'; why: string };

/**
 * Reads and validates the cordon file. The file exists only while the node
 * is cordoned, and is written atomically, so a half-written one is never
 * this agent's; what is not a complete, valid file (a hand edit, a damaged
 * disk, a symlink) is reported as corrupt for the caller to judge.
 */
export async function readCordonFile(path: string): Promise<CordonFileRead> {
  let text: string;
  try {
    const fh = await openRegularFile(path);
    try {
      const size = (await fh.stat()).size;
      if (size > MAX_CORDON_FILE_BYTES) return { kind: 'corrupt', why: `it is ${size} bytes, more than a cordon file ever is` };
      text = await fh.readFile('utf8');
    } finally {
      await fh.close();
    }
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return { kind: 'none' };
    return { kind: 'corrupt', why: errorMessage(err) };
  }
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return { kind: 'corrupt', why: 'it is not JSON' };
  }
  const o = (typeof v === 'object' && v !== null ? v : {}) as Record<string, unknown>;
  if (o.version !== CORDON_FILE_VERSION) return { kind: 'corrupt', why: `version ${JSON.stringify(o.version)}, expected ${CORDON_FILE_VERSION}` };
  if (typeof o.reason !== 'string' || cordonReasonProblem(o.reason)) return { kind: 'corrupt', why: 'its reason is not one line of at most 200 characters' };
  if (!Number.isSafeInteger(o.since_ms) || (o.since_ms as number) <= 0) return { kind: 'corrupt', why: 'its since_ms is not a time' };
  if (!Number.isSafeInteger(o.by_uid) || (o.by_uid as number) < -1) return { kind: 'corrupt', why: 'its by_uid is not a uid' };
  return { kind: 'cordoned', record: { reason: o.reason, sinceMs: o.since_ms as number, byUid: o.by_uid as number } };
}

/** Writes the cordon atomically (a crash leaves the old file or the new one) before the call that asked for it returns. */
export async function writeCordonFile(path: string, r: CordonRecord): Promise<void> {
  await writeFileAtomic(path, `${JSON.stringify({ version: CORDON_FILE_VERSION, reason: r.reason, since_ms: r.sinceMs, by_uid: r.byUid })}\n`);
}

/** Uncordoned: the file goes; a missing one already was. */
export async function removeCordonFile(path: string): Promise<void> {
  try {
    await unlink(path);
  } catch (err) {
    if (errnoCode(err) !== 'ENOENT') throw err;
  }
}
