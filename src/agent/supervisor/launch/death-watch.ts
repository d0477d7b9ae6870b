import type { DeathInfo } from '../../../lib/engine-death.js';
import { errorMessage } from '../../../lib/errors.js';
import { watchPidExit } from '../../../lib/process/pidfd.js';
import { checkIdentity, type ProcessIdentity } from '../../../lib/process/process-identity.js';
import type { EngineUnit } from './engine-unit.js';
import { readUnitExit } from './read-unit-exit.js';
import type { ChildProcess } from 'node:child_process';

/** How often an adopted engine (not our child: no exit event) is checked for being gone. The bound: at most every 500 ms. */
export const IDENTITY_POLL_MS = 500;
/**
 * With a pidfd watching an engine that is not our child (adopted, or a unit's
 * main process), the identity poll is only a backstop: it catches a watch
 * that never fires (an fd closed under us), not the common death, which the
 * pidfd reports at once (issue 18, bench 3b and 10b).
 */
export const PIDFD_BACKSTOP_MS = 5000;
/**
 * Without a pidfd, how often a unit engine's main pid is looked at. Its exit
 * status is systemd's to read, but only once the death is seen: every 25 ms
 * keeps kill → FAILED on the stream within the 300 ms with the
 * systemctl calls that follow (bench figure 10), for one read of
 * /proc/<pid>/stat (microseconds) each time.
 */
export const UNIT_DEATH_POLL_MS = 25;


/**
 * Calls `onDeath` once when the engine leader is gone, until `signal` aborts.
 * Our own child reports its exit at once, with the status. An engine that is
 * not our child sends no event: it is checked by identity, so a pid reused
 * after its death reads as dead, not as alive; under systemd-run its exit
 * status is then read from its unit, as systemd recorded it.
 */
export function watchDeath(opts: {
  child?: ChildProcess;
  pid: number;
  identity: ProcessIdentity;
  unit?: EngineUnit;
  signal: AbortSignal;
  onDeath: (info: DeathInfo) => void;
  /** The identity poll's interval while a pidfd watches (tests make it long so only the pidfd can see a death). */
  backstopMs?: number;
  log?: { debug(obj: object, msg: string): void };
}): void {
  const { child, signal, unit } = opts;
  if (signal.aborted) return;
  if (child) {
    const onExit = (code: number | null, sig: NodeJS.Signals | null) => opts.onDeath({ known: true, code, signal: sig });
    // It may have exited before the listener was attached.
    if (child.exitCode !== null || child.signalCode !== null) {
      opts.onDeath({ known: true, code: child.exitCode, signal: child.signalCode });
      return;
    }
    child.once('exit', onExit);
    signal.addEventListener('abort', () => child.off('exit', onExit), { once: true });
    return;
  }
  let reported = false;
  const check = () => {
    if (reported || signal.aborted) return;
    const seen = checkIdentity(opts.pid, opts.identity);
    if (seen.alive) return;
    reported = true;
    clearInterval(timer);
    if (!unit) {
      opts.onDeath({ known: false, reason: seen.reason });
      return;
    }
    void readUnitExit(unit, opts.pid, signal).then(
      (r) =>
        'exit' in r
          ? opts.onDeath({ known: true, ...r.exit, recordedBy: `systemd, ${unit.name} Result=${r.result}` })
          : opts.onDeath({ known: false, reason: `${seen.reason}; ${r.reason}` }),
      (err: unknown) => {
        if (!signal.aborted) opts.onDeath({ known: false, reason: `${seen.reason}; its unit's status could not be read: ${errorMessage(err)}` });
      },
    );
  };
  // A pidfd sees the leader's exit at once, with the poll slowed to a
  // backstop: an adopted engine's, and a unit's main process (systemd's
  // child, not ours), whose status is then read from systemd. The 25 ms poll
  // left a unit engine's death unseen for 12 ms on average (bench 10b).
  // Without a pidfd the poll is all there is.
  let pollMs = unit ? UNIT_DEATH_POLL_MS : IDENTITY_POLL_MS;
  const watch = watchPidExit(opts.pid, signal, check);
  if (watch.kind === 'watching') {
    pollMs = opts.backstopMs ?? PIDFD_BACKSTOP_MS;
  } else if (watch.kind === 'unsupported' && !unsupportedLogged) {
    unsupportedLogged = true;
    opts.log?.debug({ reason: watch.reason }, 'no pidfd: engines that are not our children are checked by polling /proc');
  }
  const timer = setInterval(check, pollMs);
  timer.unref();
  signal.addEventListener('abort', () => clearInterval(timer), { once: true });
  // The pidfd names whatever has the pid when it was opened: the identity is
  // checked again now, so a pid reused just before the open is seen as the
  // engine's death, not watched as the engine; 'gone' is checked now too.
  check();
}

/** Said once per agent, not once per adopted engine. */
let unsupportedLogged = false;
