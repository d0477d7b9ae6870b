import { create } from '@bufbuild/protobuf';
import { join } from 'node:path';
import type { CheckedStartShard } from '../lib/shard-id.js';
import { type Register, type SetAdapters, ShardState, type ShardStatus, ShardStatusSchema } from '../gen/llmgw/v1/agent_pb.js';
import type { Logger } from '../lib/logger.js';
import { RateLimitedLog } from '../lib/rate-limited-log.js';
import { isValidShardId } from '../lib/shard-id.js';
import type { AdminAdapters } from './admin/admin-backend.js';
import { adapterStateDir } from './adapters/desired-adapters-file.js';
import { NodeAdapters } from './adapters/node-adapters.js';
import { adapterFactsOf, adapterLaunchOf, adapterStoreCalls, shardAdapterAccess } from './adapters/shard-adapter-access.js';
import { statusFromSnapshot } from './connection/shard-report.js';
import type { NodeModels } from './models/node-models.js';
import { KnownAnswerBook } from './supervisor/probes/known-answer-book.js';
import type { Supervisor } from './supervisor/supervisor.js';


export interface AgentAdaptersOptions {
  nodeId: string;
  stateDir: string;
  supervisor: Supervisor;
  models: NodeModels;
  /** Sends a shard's status (StatusReporter.report). */
  report: (status: ShardStatus) => void;
  log: Logger;
}

/**
 * The node's LoRA adapters as the agent assembles them (issue 53): the
 * reconciler (NodeAdapters) with its seams, what every ShardStatus and
 * RunningShard carries of them, SetAdapters from the stream and the admin
 * socket's view. Kept out of agent.ts, which only wires it.
 */
export class AgentAdapters {
  readonly node: NodeAdapters;
  private readonly refusals: RateLimitedLog;
  private readonly answers: KnownAnswerBook;

  constructor(private readonly opts: AgentAdaptersOptions) {
    this.refusals = new RateLimitedLog(opts.log);
    const answers = new KnownAnswerBook(join(adapterStateDir(opts.stateDir), 'answers.json'));
    this.answers = answers;
    this.node = new NodeAdapters({
      stateDir: opts.stateDir,
      shards: opts.supervisor,
      facts: adapterFactsOf,
      access: (shard) => shardAdapterAccess(shard, opts.stateDir, answers),
      store: adapterStoreCalls(opts.models),
      report: (id) => {
        const shard = isValidShardId(id) ? opts.supervisor.get(id) : undefined;
        if (shard) opts.report(statusFromSnapshot(opts.nodeId, shard));
      },
      log: opts.log,
    });
  }

  /** ShardStatus with the shard's adapters, and a stall after an unload as its error when it has none. */
  decorate(s: ShardStatus): ShardStatus {
    const adapters = this.node.statuses(s.shardId);
    if (adapters.length === 0) return s;
    return create(ShardStatusSchema, { ...s, adapters, error: s.error || this.node.stallOf(s.shardId) || '' });
  }

  /** Register with each running shard's adapters (RunningShard.adapters). */
  withRunningAdapters(r: Register): Register {
    for (const running of r.runningShards) running.adapters = this.node.statuses(running.shardId);
    return r;
  }

  /** Why a StartShard's adapters may not be (StartAdmission, before anything is launched); undefined when they may. */
  startProblem(spec: CheckedStartShard): string | undefined {
    return this.node.startProblem(spec);
  }

  /** The flags and environment the shard's adapters need at launch (its wing's adapters.launch). */
  launch(spec: CheckedStartShard): { args: string[]; env: Record<string, string> } | undefined {
    return adapterLaunchOf(spec);
  }

  /** A SetAdapters: refused whole in one line in the shard's status (its state unchanged), or reconciled with each adapter reported. */
  async set(m: SetAdapters): Promise<void> {
    const out = await this.node.set(m.shardId, m.adapters);
    if ('ok' in out) return;
    const why = `set_adapters refused: ${out.refused}`;
    this.refusals.warn({ shard: m.shardId.slice(0, 128), err: why }, 'refused a SetAdapters');
    const shard = isValidShardId(m.shardId) ? this.opts.supervisor.get(m.shardId) : undefined;
    const { nodeId } = this.opts;
    this.opts.report(shard ? create(ShardStatusSchema, { ...statusFromSnapshot(nodeId, shard), error: why }) : create(ShardStatusSchema, { nodeId, shardId: m.shardId, state: ShardState.FAILED, error: why }));
  }

  /** What `ctl adapters` reads and changes. */
  admin(): AdminAdapters {
    const sup = this.opts.supervisor;
    return {
      statuses: (id) => this.node.statuses(id),
      desired: (id) => {
        const shard = sup.get(id);
        return shard ? this.node.desired(shard) : [];
      },
      limits: (id) => {
        const shard = sup.get(id);
        return shard ? this.node.limits(shard) : { maxLoaded: 0, maxRank: 0 };
      },
      set: (id, adapters) => this.node.set(id, adapters),
    };
  }

  /** Resolves once the last write of the ledger and of the answers has ended; none starts after this. */
  async close(): Promise<void> {
    await Promise.all([this.node.close(), this.answers.close()]);
  }
}
