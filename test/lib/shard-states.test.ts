import { describe, expect, it } from 'vitest';
import { ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import { REPORTED_SHARD_STATES, SHARD_STATES, TERMINAL_SHARD_STATES, isServing, stateName } from '../../src/lib/shard-states.js';

/* The one shard vocabulary (issue 38): every value of the proto enum is classified, and the lists derive from it. */

describe('the shard vocabulary', () => {
  const values = Object.values(ShardState).filter((v): v is ShardState => typeof v === 'number');

  it('classifies every value of the proto enum, under the enum\'s own name', () => {
    for (const v of values) expect(SHARD_STATES[v]?.name, `state ${v}`).toBe(ShardState[v]);
    expect(Object.keys(SHARD_STATES).map(Number).sort()).toEqual([...values].sort());
  });

  it('derives the lists the agent, ctl and metrics use', () => {
    expect([...TERMINAL_SHARD_STATES].map(stateName)).toEqual(['STOPPED', 'FAILED', 'EXITED']);
    expect(values.filter(isServing).map(stateName)).toEqual(['READY', 'UNHEALTHY', 'DRAINING']);
    expect(REPORTED_SHARD_STATES).not.toContain(ShardState.UNSPECIFIED);
    expect(REPORTED_SHARD_STATES).toContain(ShardState.SLEEPING);
    expect(stateName(99 as ShardState)).toBe('99');
  });
});
