import { describe, expect, it } from 'vitest';
import { systemdUnitName } from '../../../src/lib/systemd/unit-name.js';

describe('systemdUnitName', () => {
  it('always names a service, even for a shard id that ends like another unit type', () => {
    expect(systemdUnitName('x.socket')).toBe('llmgw-shard-x.socket.service');
  });

  it('always carries the .service suffix, so an id ending in .service names the same unit everywhere (security review, finding 15)', () => {
    expect(systemdUnitName('x.service')).toBe('llmgw-shard-x.service.service');
    expect(systemdUnitName('a-b_c.1')).toBe('llmgw-shard-a-b_c.1.service');
  });

  it('escapes what a unit name cannot hold as systemd-escape does', () => {
    expect(systemdUnitName('a b/é')).toBe('llmgw-shard-a\\x20b\\x2f\\xc3\\xa9.service');
  });
});
