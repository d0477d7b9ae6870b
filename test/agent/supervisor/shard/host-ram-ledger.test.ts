import { describe, expect, it } from 'vitest';
import { HostRamLedger } from '../../../../src/agent/supervisor/shard/host-ram-ledger.js';

/* Host RAM promised to sleeps under way (moved from concurrent-sleeps.test.ts, assertions unchanged). */

describe('HostRamLedger', () => {
  it('judges each claim by the claims made before it and still held, read when judged', () => {
    const ledger = new HostRamLedger();
    const a = ledger.claim('a', 100);
    const b = ledger.claim('b', 200);
    const c = ledger.claim('c', 300);
    expect(a.ahead()).toEqual({ mib: 0, shards: [] });
    expect(c.ahead()).toEqual({ mib: 300, shards: ['a', 'b'] });
    a.release();
    a.release();
    expect(c.ahead()).toEqual({ mib: 200, shards: ['b'] });
    expect(b.ahead()).toEqual({ mib: 0, shards: [] });
    expect(ledger.promisedMib()).toBe(500);
  });
});
