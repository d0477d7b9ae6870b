import { create } from '@bufbuild/protobuf';
import { describe, expect, it, onTestFinished } from 'vitest';
import { parseDeployment } from '../../src/control/load-deployment.js';
import { refusingConditions } from '../../src/control/node-takes-shards.js';
import { InventorySchema, NodeConditionSchema, RegisterSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { until } from '../helpers/engine-processes.js';
import { FakeAgent, fixtureInventory, isStart } from '../helpers/fake-agent.js';
import { startControlPlane } from '../helpers/start-control-plane.js';

/*
 * Walkthrough 4, O18: under DiskPressure the reference control plane said only
 * "needs 1 node(s) with 1 free healthy GPU(s); 0 of the connected nodes have
 * that". A node that takes no new shard is now named, with its condition.
 */

const TINY = parseDeployment('profiles:\n  tiny:\n    engine: sim\n    model: sim/tiny\nreplicas:\n  - name: tiny\n    profile: tiny\n    count: 1\n', 'tiny.yaml');
const PRESSURE = 'log_dir /var/log/llmgw has 900 MiB free (< 1 GiB)';

describe('placement names the nodes that take no new shard (walkthrough 4, O18)', () => {
  it('says which node is under DiskPressure and why; placed once it clears', async () => {
    const { cp, url } = await startControlPlane({ deployment: TINY });
    const a = new FakeAgent({ baseUrl: url, nodeId: 'node-a', mgmtAddr: '127.0.0.1', gpus: 0 });
    onTestFinished(() => a.kill());
    const lastError = () => cp.replicas()[0]?.lastError ?? '';
    // Look-alike first: no GPU at all, no condition: the reason names no node.
    await until(() => lastError().startsWith('needs 1 node(s)'), 'a placement failure for the GPU-less node');
    expect(lastError()).toBe('needs 1 node(s) with 1 free healthy GPU(s); 0 of the connected nodes have that');
    const gpus = fixtureInventory(1).gpus;
    a.send({ case: 'inventory', value: create(InventorySchema, { gpus, conditions: [create(NodeConditionSchema, { type: 'DiskPressure', active: true, reason: PRESSURE })] }) });
    await until(() => lastError().includes('taking no new shard'), 'the reason naming node-a');
    expect(lastError()).toBe(`needs 1 node(s) with 1 free healthy GPU(s); 0 of the connected nodes have that; taking no new shard: node-a (DiskPressure: ${PRESSURE})`);
    const started = a.waitFor(isStart, { timeoutMs: 20_000 });
    a.send({ case: 'inventory', value: create(InventorySchema, { gpus, conditions: [create(NodeConditionSchema, { type: 'DiskPressure', active: false })] }) });
    await started;
  });

  it('names a cordon from Register alone for an agent that sends no conditions', () => {
    expect(refusingConditions(create(RegisterSchema, { cordoned: true }), create(InventorySchema))).toBe('Cordoned');
    const both = create(InventorySchema, { conditions: [create(NodeConditionSchema, { type: 'Cordoned', active: true, reason: 'PSU swap' }), create(NodeConditionSchema, { type: 'DiskPressure', active: false })] });
    expect(refusingConditions(create(RegisterSchema), both)).toBe('Cordoned: PSU swap');
  });
});
