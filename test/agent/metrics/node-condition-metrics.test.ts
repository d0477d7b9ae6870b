import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { registerNodeConditionMetrics } from '../../../src/agent/metrics/node-condition-metrics.js';

describe('llmgw_node_condition', () => {
  it('is 1 for a condition that holds and 0 for one that does not, read at scrape time', async () => {
    const registry = new Registry();
    let diskFull = false;
    registerNodeConditionMetrics(registry, () => [
      { type: 'DiskPressure', active: diskFull },
      { type: 'Cordoned', active: true },
    ]);
    expect(await registry.metrics()).toContain('llmgw_node_condition{condition="DiskPressure"} 0\nllmgw_node_condition{condition="Cordoned"} 1');
    diskFull = true;
    expect(await registry.metrics()).toContain('llmgw_node_condition{condition="DiskPressure"} 1');
  });
});
