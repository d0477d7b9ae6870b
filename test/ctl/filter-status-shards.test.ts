import { describe, expect, it } from 'vitest';
import { parseStateFilter } from '../../src/ctl/filter-status-shards.js';

describe('ctl status --state', () => {
  it('picks states by name, any case, comma-separated, and refuses a name that is no state', () => {
    expect(parseStateFilter('failed, Exited')).toEqual(['SHARD_STATE_FAILED', 'SHARD_STATE_EXITED']);
    expect(parseStateFilter('SHARD_STATE_READY')).toEqual(['SHARD_STATE_READY']);
    expect(() => parseStateFilter('crashed')).toThrow(/no shard state "CRASHED"; use one or more of STARTING, READY/);
    expect(() => parseStateFilter(',')).toThrow(/name at least one state/);
  });
});
