import { errorMessage } from '../../../lib/errors.js';
import type { Logger } from '../../../lib/logger.js';
import type { DeathInfo } from '../../../lib/engine-death.js';
import { watchDeath } from './death-watch.js';
import { type EngineGroup, groupStillOurs, reapLeftovers } from './engine-group.js';
import type { EngineUnit } from './engine-unit.js';
import { type EngineFence, endEngine } from './end-engine.js';
import { endUnitLeftovers } from './stop-engine-unit.js';
import type { TerminateOutcome } from '../../../lib/process/terminate-process-group.js';

/**
 * The processes of one shard's engine: its leader, its process group and,
 * under systemd-run, its unit. Only what reaches them (signals, waits,
 * identity checks); what they mean for the shard is the runner's to decide.
 */
export class EngineProcess {
  constructor(
    private readonly group: EngineGroup,
    /** Its systemd unit (systemd-run): its cgroup is what a stop ends, and systemd records its exit status. */
    readonly unit: EngineUnit | undefined,
  ) {}

  /** Whether signalling the shard's process group still reaches the engine it names (see groupStillOurs). */
  stillOurs(): boolean {
    return groupStillOurs(this.group);
  }

  /** What ends everything of this engine: its unit's cgroup, or its process group. */
  fence(): EngineFence {
    return { pgid: this.group.pgid, unit: this.unit, stillOurs: () => this.stillOurs() };
  }

  /** Calls `onDeath` once when the leader is gone, until `signal` aborts (see watchDeath). */
  watchDeath(signal: AbortSignal, onDeath: (info: DeathInfo) => void): void {
    const { child, pid, identity } = this.group;
    watchDeath({ child, pid, identity, unit: this.unit, signal, onDeath });
  }

  /** Terminates the whole engine: SIGTERM, `graceMs`, SIGKILL (see endEngine). */
  end(opts: { graceMs: number; signal?: AbortSignal }): Promise<TerminateOutcome> {
    return endEngine(this.fence(), opts);
  }

  /** Ends what survives a dead leader: the rest of its unit's cgroup, or of its process group. */
  async reapLeftovers(opts: { graceMs: number; signal: AbortSignal; log: Logger }): Promise<void> {
    if (this.unit) {
      // The unit's cgroup holds whatever the engine left, in or out of its group.
      try {
        await endUnitLeftovers(this.unit, { graceMs: opts.graceMs, signal: opts.signal });
      } catch (err) {
        opts.log.warn({ unit: this.unit.name, err: errorMessage(err) }, "ending the rest of a dead engine's unit failed");
      }
      return;
    }
    await reapLeftovers(this.group, opts);
  }

  /**
   * The exit status of our own child once Node has reaped it, waiting up to
   * `ms`; undefined for an adopted engine or one not reaped by then.
   */
  async childExit(ms: number): Promise<{ code: number | null; signal: NodeJS.Signals | null } | undefined> {
    const child = this.group.child;
    if (!child) return undefined;
    if (child.exitCode === null && child.signalCode === null) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, ms);
        function done() {
          clearTimeout(timer);
          child?.off('exit', done);
          resolve();
        }
        child.once('exit', done);
      });
    }
    if (child.exitCode === null && child.signalCode === null) return undefined;
    return { code: child.exitCode, signal: child.signalCode };
  }
}
