import type { Inventory } from '../../gen/llmgw/v1/agent_pb.js';
import type { ConnectionStatus } from '../connection/connection-state.js';
import type { AgentMetricsSources } from './agent-metrics.js';
import type { Supervisor } from '../supervisor/supervisor.js';
import type { GpuMetricsView } from './gpu-metrics.js';
import type { NodeConditionView } from './node-condition-metrics.js';
import { DEFAULT_FOREIGN_MEMORY_SHARE, foreignMemoryProblem } from '../../lib/foreign-memory-problem.js';

/*
 * What the metrics read of the rooms above them, declared here as the
 * connection declares its metrics (connection-metrics.ts): the agent and
 * the admin socket are composed above metrics/, which must not import them.
 */

/** What the metrics read of the running agent (agent.ts's Agent is one). */
export interface MetricsAgentView {
  connectionStatus(): ConnectionStatus;
  readonly conditions: { list(): readonly NodeConditionView[] };
  currentInventory(): Inventory;
  /** Each GPU's latest reading and the health watch's verdict (admin-backend.ts's GpuHealthView). */
  gpuHealth(): readonly Pick<GpuMetricsView, 'index' | 'memoryUsedMb' | 'healthy' | 'fault'>[];
  /** Each shard's LoRA adapters (agent-adapters.ts's AgentAdapters), for llmgw_adapter_*. */
  readonly adapters: { readonly node: { all(): ReturnType<NonNullable<AgentMetricsSources['adapters']>> } };
}

/** What the metrics read of the admin socket (admin-server.ts's AdminServer is one). */
export interface MetricsAdminView {
  readonly openConnections: number;
  readonly refusedConnectionCount: number;
}

/**
 * The running agent's parts as the metrics read them at each scrape: the
 * supervisor's shard list, the inventory with each GPU's latest memory
 * reading and fault, the stream's status, the admin socket's connections.
 */
export function agentMetricsSources(o: { agent: MetricsAgentView; supervisor: Supervisor; admin: MetricsAdminView; node: string; version: string; foreignMemoryShare?: number }): AgentMetricsSources {
  const { agent, supervisor, admin } = o;
  return {
    node: o.node,
    version: o.version,
    shards: () => supervisor.list(),
    onTransition: (listener) => supervisor.react({ name: 'launch and readiness timed', on: listener }),
    inFlight: (id) => supervisor.inFlight(id),
    connection: () => agent.connectionStatus(),
    adminConnections: () => ({ open: admin.openConnections, refused: admin.refusedConnectionCount }),
    conditions: () => agent.conditions.list(),
    warmth: () => agent.currentInventory().warmth,
    adapters: () => agent.adapters.node.all(),
    gpus: () => {
      const byIndex = new Map(agent.gpuHealth().map((h) => [h.index, h]));
      const inventory = agent.currentInventory();
      return inventory.gpus.map((g): GpuMetricsView => {
        const h = byIndex.get(g.index);
        // The rule StartShard refuses by, as ctl status shows it: one answer to "is this GPU usable" (walkthrough 3, item 5).
        const refusal = foreignMemoryProblem(g, inventory.processes, o.foreignMemoryShare ?? DEFAULT_FOREIGN_MEMORY_SHARE);
        return {
          index: g.index,
          uuid: g.uuid,
          pciBusId: g.pciBusId,
          memoryUsedMb: h?.memoryUsedMb ?? g.memoryUsedMb,
          memoryTotalMb: g.memoryTotalMb,
          healthy: h?.healthy ?? g.healthy,
          fault: h?.fault,
          ...(refusal ? { refusal } : {}),
        };
      });
    },
  };
}
