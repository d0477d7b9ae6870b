import type { AdminServer } from './admin/admin-server.js';
import type { Agent } from './agent.js';
import type { AgentMetricsSources } from './metrics/agent-metrics.js';
import type { Supervisor } from './supervisor/supervisor.js';
import type { GpuMetricsView } from './metrics/gpu-metrics.js';
import { DEFAULT_FOREIGN_MEMORY_SHARE, foreignMemoryProblem } from '../lib/foreign-memory-problem.js';

/**
 * The running agent's parts as the metrics read them at each scrape: the
 * supervisor's shard list, the inventory with each GPU's latest memory
 * reading and fault, the stream's status, the admin socket's connections.
 */
export function agentMetricsSources(o: { agent: Agent; supervisor: Supervisor; admin: AdminServer; node: string; version: string; foreignMemoryShare?: number }): AgentMetricsSources {
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
