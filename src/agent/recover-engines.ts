import type { ShardStatus } from '../gen/llmgw/v1/agent_pb.js';
import { errorMessage } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';
import { isTerminal } from '../lib/shard-states.js';
import { refusedStatus } from './connection/shard-report.js';
import type { Orphan } from '../lib/process/orphan.js';
import type { ShardSnapshot } from './supervisor/shard/shard-snapshot.js';
import type { Supervisor } from './supervisor/supervisor.js';

export type AdoptOutcomeKind = 'adopted' | 'killed' | 'cleaned' | 'already-supervised' | 'error';

export interface AdoptResultView {
  shardId: string;
  outcome: AdoptOutcomeKind;
  pid: number;
  reason: string;
}

/**
 * How long recovery waits for an unidentified engine to go after SIGKILL.
 * One stuck in uninterruptible sleep (a GPU driver hang) would otherwise keep
 * recovery, and so registration and READY=1, waiting for ever; under systemd
 * that is a start-timeout restart loop (finding 14 of the security review).
 */
export const RECOVERY_KILL_WAIT_MS = 10_000;

export interface RecoverEnginesOptions {
  nodeId: string;
  supervisor: Supervisor;
  /** How long an adopted engine may take to prove it serves (adopt_ready_timeout). */
  adoptReadyTimeoutMs: number;
  /** Settles an adopted shard by the same runner path as a fresh start. */
  settle: (shard: ShardSnapshot, timeoutMs: number) => Promise<void>;
  report: (status: ShardStatus) => void;
  logger: Logger;
  /** The wait after SIGKILL for an unidentified engine; default RECOVERY_KILL_WAIT_MS (10 s). */
  killWaitMs?: number;
}

/**
 * Takes back engines a previous agent left running. Dead ones have their
 * state cleaned; live ones that cannot be identified are killed, because a
 * process holding GPUs that nothing can describe is worse than none
 * (placement would hand those GPUs out again); identified ones are adopted
 * and settled in the background, so that registration is not delayed.
 */
export class RecoverEngines {
  /** The orphan scan in progress, if any; scans queue behind it. */
  private adopting: Promise<void> = Promise.resolve();

  constructor(private readonly opts: RecoverEnginesOptions) {}

  recover(): Promise<AdoptResultView[]> {
    // One scan at a time: `ctl adopt` during the start-up scan would judge the
    // same state files twice and try to adopt an engine already taken.
    const scan = this.adopting.then(() => this.scan());
    this.adopting = scan.then(
      () => {},
      () => {},
    );
    return scan;
  }

  /**
   * `ctl adopt`: rescans now, and lists the shards already supervised too, so
   * that the operator sees every engine the state directory describes.
   */
  async adoptNow(): Promise<AdoptResultView[]> {
    const results = await this.recover();
    const taken = new Set(results.map((r) => r.shardId));
    for (const s of this.opts.supervisor.list()) {
      if (isTerminal(s.state) || taken.has(s.shardId)) continue;
      results.push({ shardId: s.shardId, outcome: 'already-supervised', pid: s.pid, reason: '' });
    }
    return results.sort((a, b) => a.shardId.localeCompare(b.shardId));
  }

  private async scan(): Promise<AdoptResultView[]> {
    const { supervisor: sup, nodeId, report } = this.opts;
    let orphans: Orphan[];
    try {
      orphans = await sup.findOrphans();
    } catch (err) {
      this.opts.logger.warn({ err: errorMessage(err) }, 'scanning for engines left by a previous agent failed');
      return [{ shardId: '', outcome: 'error', pid: 0, reason: errorMessage(err) }];
    }
    const results: AdoptResultView[] = [];
    const unidentified: Orphan[] = [];
    for (const o of orphans) {
      const log = this.opts.logger.child({ shard: o.shardId, pid: o.pid });
      try {
        // Either way the control plane is told, with the reason: Register
        // lists only what runs, and a shard that vanished from the list
        // without a word leaves an operator nothing to go on.
        if (!o.alive) {
          const why = `engine ended while the agent was down: ${o.reason}`;
          // Still listed by ctl status --all, as it was before the restart, with its state file, so that every
          // later restart keeps it too until terminal_retention (walkthrough 4, O3); one not kept goes (killOrphan).
          let kept = false;
          try {
            kept = sup.keepEnded(o, why);
          } catch (err) {
            log.warn({ err: errorMessage(err) }, 'could not keep the ended shard for ctl status --all');
          }
          // Its unit and whatever is left of its groups go either way; the state file stays with a kept shard.
          await sup.killOrphan(o, { keepStateFile: kept });
          log.info({ why: o.reason }, 'cleaned the state of an engine that is gone');
          results.push({ shardId: o.shardId, outcome: 'cleaned', pid: o.pid, reason: o.reason });
          const status = refusedStatus(nodeId, o, why);
          // What systemd recorded for a unit engine; 0 (unknown) otherwise.
          status.exitCode = o.exitCode ?? 0;
          status.signal = o.exitSignal ?? '';
          report(status);
        } else if (!o.identified) {
          unidentified.push(o);
        } else {
          const shard = sup.adopt(o);
          log.info({ replica: o.replicaId }, 'adopted a running engine');
          results.push({ shardId: o.shardId, outcome: 'adopted', pid: o.pid, reason: '' });
          void this.opts.settle(shard, this.opts.adoptReadyTimeoutMs);
        }
      } catch (err) {
        results.push(this.failed(o, err));
      }
    }
    // Together, and bounded after SIGKILL: one at a time with the full
    // stop_grace each, five held logs kept the agent from registering for
    // 52 s (finding 4 of the security review), and one engine stuck in
    // uninterruptible sleep kept it from ever registering (finding 14).
    const killWaitMs = this.opts.killWaitMs ?? RECOVERY_KILL_WAIT_MS;
    const killed = await Promise.all(
      unidentified.map(async (o): Promise<AdoptResultView> => {
        this.opts.logger.warn({ shard: o.shardId, pid: o.pid, why: o.reason }, 'killing an engine that cannot be identified');
        try {
          await sup.killOrphan(o, { killWaitMs });
        } catch (err) {
          return this.failed(o, err);
        }
        report(refusedStatus(nodeId, o, `engine killed after an agent restart: it could not be identified (${o.reason})`));
        return { shardId: o.shardId, outcome: 'killed', pid: o.pid, reason: o.reason };
      }),
    );
    results.push(...killed);
    return results;
  }

  /** An orphan recovery could not deal with: logged, and reported FAILED with the reason. */
  private failed(o: Orphan, err: unknown): AdoptResultView {
    this.opts.logger.warn({ shard: o.shardId, pid: o.pid, err: errorMessage(err) }, 'recovering an engine failed');
    this.opts.report(refusedStatus(this.opts.nodeId, o, `recovering the engine after an agent restart failed: ${errorMessage(err)}`));
    return { shardId: o.shardId, outcome: 'error', pid: o.pid, reason: errorMessage(err) };
  }
}
