import { describe, expect, it } from 'vitest';
import { unitNoteOf } from '../../../../src/agent/supervisor/orphans/unit-orphan.js';
import type { EngineUnit } from '../../../../src/agent/supervisor/launch/engine-unit.js';
import type { UnitStatus } from '../../../../src/lib/systemd/read-unit-status.js';

const UNIT: EngineUnit = { name: 'llmgw-shard-s1.service', invocationId: 'a'.repeat(32) };

function status(over: Partial<UnitStatus> = {}): UnitStatus {
  return {
    LoadState: 'loaded',
    ActiveState: 'active',
    SubState: 'running',
    Result: 'success',
    InvocationID: 'a'.repeat(32),
    MainPID: '4242',
    ExecMainPID: '4242',
    ExecMainCode: '0',
    ExecMainStatus: '0',
    ControlGroup: '/llmgw.slice/llmgw-shard-s1.service',
    ...over,
  };
}

describe('unitNoteOf', () => {
  it('has nothing to say of the run recorded, with the engine as its main process', () => {
    expect(unitNoteOf(status(), UNIT, 4242)).toBeUndefined();
  });

  it('says systemd forgot the unit (not-found), watched by pid', () => {
    expect(unitNoteOf(status({ LoadState: 'not-found', InvocationID: '', MainPID: '' }), UNIT, 4242)).toBe(
      'unit llmgw-shard-s1.service forgotten by systemd (LoadState not-found); watched by pid',
    );
  });

  it('says the unit is another run when its invocation differs', () => {
    expect(unitNoteOf(status({ InvocationID: 'b'.repeat(32) }), UNIT, 4242)).toBe(
      `unit llmgw-shard-s1.service is another run (invocation ${'b'.repeat(32)}, recorded ${'a'.repeat(32)}); watched by pid`,
    );
  });

  it('says systemd no longer knows a unit in another load state', () => {
    expect(unitNoteOf(status({ LoadState: 'masked' }), UNIT, 4242)).toBe(
      'systemd no longer knows unit llmgw-shard-s1.service (LoadState masked); watched by pid',
    );
    expect(unitNoteOf(status({ LoadState: '' }), UNIT, 4242)).toContain('(LoadState empty)');
  });

  it('says whose the main pid is when it is not the recorded engine, or none', () => {
    expect(unitNoteOf(status({ MainPID: '999' }), UNIT, 4242)).toBe(
      "unit llmgw-shard-s1.service's main pid is 999, recorded 4242; watched by pid",
    );
    expect(unitNoteOf(status({ MainPID: '' }), UNIT, 4242)).toBe(
      "unit llmgw-shard-s1.service's main pid is none, recorded 4242; watched by pid",
    );
  });
});
