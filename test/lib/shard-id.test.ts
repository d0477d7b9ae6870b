import { describe, expect, it } from 'vitest';
import { LlmgwError } from '../../src/lib/errors.js';
import { parseShardId, isValidShardId } from '../../src/lib/shard-id.js';

describe('shard ids', () => {
  it.each(['a', 'r1-s0', 'llama3.70b_tp8-0', 'A'.repeat(128)])('accepts %s', (id) => {
    expect(isValidShardId(id)).toBe(true);
  });

  it.each(['', '../x', 'a/b', '.hidden', '-x', 'a b', 'x'.repeat(129), 'x'.repeat(200), 'é'])('refuses %j', (id) => {
    expect(isValidShardId(id)).toBe(false);
    expect(() => parseShardId(id)).toThrow(LlmgwError);
  });

  it('names the bad id and the rule in the error', () => {
    expect(() => parseShardId('../x')).toThrow(/invalid shard id "..\/x": use 1-128 characters/);
  });
});
