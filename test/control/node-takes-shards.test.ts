import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { InventorySchema, NodeConditionSchema, RegisterSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { nodeTakesShards } from '../../src/control/node-takes-shards.js';

const cond = (type: string, active: boolean) => create(NodeConditionSchema, { type, active });
const inv = (...conditions: ReturnType<typeof cond>[]) => create(InventorySchema, { conditions });

describe('nodeTakesShards', () => {
  it('takes shards while no refusing condition holds', () => {
    expect(nodeTakesShards(create(RegisterSchema), inv(cond('DiskPressure', false), cond('Cordoned', false)))).toBe(true);
  });

  it('takes none while the node is cordoned or under disk pressure', () => {
    expect(nodeTakesShards(create(RegisterSchema), inv(cond('DiskPressure', false), cond('Cordoned', true)))).toBe(false);
    expect(nodeTakesShards(create(RegisterSchema), inv(cond('DiskPressure', true), cond('Cordoned', false)))).toBe(false);
  });

  it('trusts the latest Inventory over Register (an uncordon mid-session), and Register alone for an agent that sends no conditions', () => {
    const cordonedAtRegister = create(RegisterSchema, { cordoned: true });
    expect(nodeTakesShards(cordonedAtRegister, inv(cond('Cordoned', false)))).toBe(true);
    expect(nodeTakesShards(cordonedAtRegister, inv())).toBe(false);
    expect(nodeTakesShards(create(RegisterSchema), inv())).toBe(true);
  });
});
