import { Gauge, type Registry } from 'prom-client';

/** A node condition as the metric reads it (Inventory.conditions). */
export interface NodeConditionView {
  type: string;
  active: boolean;
}

/**
 * llmgw_node_condition{condition="DiskPressure"|"Cordoned"} 0/1, read at
 * scrape time from the conditions every Inventory carries: kube-state-
 * metrics' kube_node_status_condition, so an alert on a full log disk is
 * `llmgw_node_condition{condition="DiskPressure"} == 1`.
 */
export function registerNodeConditionMetrics(registry: Registry, conditions: () => readonly NodeConditionView[]): void {
  new Gauge({
    name: 'llmgw_node_condition',
    help: 'Node conditions: 1 while the condition holds (DiskPressure: log_dir or state_dir below supervisor.disk_pressure; Cordoned: ctl cordon), 0 otherwise.',
    labelNames: ['condition'],
    registers: [registry],
    collect() {
      for (const c of conditions()) this.set({ condition: c.type }, c.active ? 1 : 0);
    },
  });
}
