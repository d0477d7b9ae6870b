import { constants as osConstants } from 'node:os';

/*
 * An engine's death as the shard machine describes it, apart from its
 * watching (supervisor/launch/death-watch.ts): the pure page of the shard's
 * life reads these without reaching the launch room and its systemd code.
 */

/** How an engine leader ended: with its status (our child, or read from its unit), or only seen gone. */
export type DeathInfo =
  | { known: true; code: number | null; signal: NodeJS.Signals | null; /** Who recorded it, when not our own wait(). */ recordedBy?: string }
  | { known: false; reason: string };

/** The exit code as a shell reports it: 128+n when killed by signal n. */
export function exitCodeOf(code: number | null, signal: NodeJS.Signals | null): number | null {
  return code ?? (signal ? 128 + (osConstants.signals[signal] ?? 0) : null);
}

/** How the engine ended, as the shard's error says it ("exited with code 1", "was killed by SIGKILL", ...). */
export function describeDeath(info: DeathInfo): string {
  if (!info.known) return `is gone (${info.reason}; not a child of this agent, so its exit status is unknown)`;
  const recorded = info.recordedBy ? ` (recorded by ${info.recordedBy})` : '';
  return info.signal ? `was killed by ${info.signal}${recorded}` : `exited with code ${info.code}${recorded}`;
}
