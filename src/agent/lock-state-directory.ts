import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { errorMessage, failure } from '../lib/errors.js';
import { tryLockFile } from '../lib/files/file-lock.js';
import type { Logger } from '../lib/logger.js';
import { ensureStateDir } from './inventory-cache.js';

/** `<state_dir>/agent.lock`: held by the one agent that uses this state directory. */
export const agentLockPath = (stateDir: string): string => join(stateDir, 'agent.lock');

/**
 * How long a start waits for the agent before it to let go of the lock: one
 * sent SIGTERM exits within a second, so `stop; start` from a script works,
 * while a second agent started by mistake is refused soon enough.
 */
export const AGENT_LOCK_WAIT_MS = 3000;
const RETRY_MS = 100;
const NO_LOCK = 'cannot lock the state directory; only the admin socket keeps a second agent out';

/**
 * Makes this agent the only one using `stateDir`, before any engine is
 * adopted or killed: two agents over the same state files would adopt, and
 * kill, the same engines. The admin socket refused a second agent too, but
 * only one started after the first was listening; two started together
 * against a stale socket could both pass its probe (review finding 13). The
 * lock is the kernel's (flock), so it is never stale.
 *
 * Refuses (a failure, exit 1) when another process holds it past
 * AGENT_LOCK_WAIT_MS. Where no lock can be taken (no FFI, a read-only state
 * directory, which the agent otherwise survives), says so once and goes on:
 * the admin socket is then the only guard, as it was. Returns the release.
 */
export async function lockStateDirectory(stateDir: string, logger: Logger, waitMs = AGENT_LOCK_WAIT_MS): Promise<() => void> {
  const path = agentLockPath(stateDir);
  try {
    ensureStateDir(stateDir);
  } catch (err) {
    logger.warn({ path, why: errorMessage(err) }, NO_LOCK);
    return () => {};
  }
  const deadline = Date.now() + waitMs;
  for (;;) {
    const lock = tryLockFile(path);
    if (lock.kind === 'held') return lock.release;
    if (lock.kind === 'unsupported') {
      logger.warn({ path, why: lock.reason }, NO_LOCK);
      return () => {};
    }
    if (Date.now() >= deadline) {
      const who = lock.holderPid === undefined ? 'another agent' : `another agent (pid ${lock.holderPid})`;
      throw failure(`${who} is running with supervisor.state_dir ${stateDir}; stop it first (systemctl stop llmgw-agent) or give this one its own state_dir`);
    }
    await sleep(RETRY_MS);
  }
}
