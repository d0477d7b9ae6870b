import { describe, expect, it } from 'vitest';
import {
  type Claimed,
  LogCallAdmission,
  MAX_FOLLOWS_PER_USER,
  MAX_LOG_READS,
  MAX_LOG_READS_PER_USER,
  ROOT_RESERVED_LOG_READS,
} from '../../../src/agent/admin/log-call-admission.js';

const MEMBER = 1001;
const OTHER = 1002;
const claimed = (c: ReturnType<LogCallAdmission['claim']>): Claimed => {
  if ('why' in c) throw new Error(`refused: ${c.why}`);
  return c;
};

describe('LogCallAdmission', () => {
  it(`lets one user other than root have ${MAX_LOG_READS_PER_USER} log reads at once, and the next when one ends`, () => {
    const a = new LogCallAdmission();
    const held = Array.from({ length: MAX_LOG_READS_PER_USER }, () => claimed(a.claim('read', MEMBER)));
    expect(a.claim('read', MEMBER)).toEqual({ why: `uid ${MEMBER} has ${MAX_LOG_READS_PER_USER} log reads in progress, the most one user other than root may` });
    // Another user, and root, are not held back by that one.
    claimed(a.claim('read', OTHER)).release();
    claimed(a.claim('read', 0)).release();
    held[0]?.release();
    // Released twice (the call's end and the client leaving) counts once.
    held[0]?.release();
    claimed(a.claim('read', MEMBER));
    expect(a.claim('read', MEMBER)).toHaveProperty('why');
    expect(a.held('read')).toBe(MAX_LOG_READS_PER_USER);
  });

  it('keeps some of the total for root: users fill the rest, root takes the reserve, then nobody', () => {
    const a = new LogCallAdmission();
    const users = MAX_LOG_READS - ROOT_RESERVED_LOG_READS;
    for (let i = 0; i < users; i++) claimed(a.claim('read', 2000 + Math.floor(i / MAX_LOG_READS_PER_USER)));
    expect(a.claim('read', 3000)).toEqual({ why: `${users} log reads are in progress, the most users other than root may hold (${ROOT_RESERVED_LOG_READS} are kept for root)` });
    for (let i = 0; i < ROOT_RESERVED_LOG_READS; i++) claimed(a.claim('read', 0));
    expect(a.claim('read', 0)).toEqual({ why: `${MAX_LOG_READS} log reads are in progress, the most there may be` });
  });

  it('counts every caller whose uid is unknown as one user, never as root', () => {
    const a = new LogCallAdmission({ reads: { perUser: 2 } });
    claimed(a.claim('read', undefined));
    claimed(a.claim('read', undefined));
    expect(a.claim('read', undefined)).toEqual({ why: 'connections whose uid is unknown have 2 log reads in progress, the most one user other than root may' });
  });

  it('counts follows apart from reads, under caps of their own', () => {
    const a = new LogCallAdmission();
    for (let i = 0; i < MAX_FOLLOWS_PER_USER; i++) claimed(a.claim('follow', MEMBER));
    expect(a.claim('follow', MEMBER)).toEqual({ why: `uid ${MEMBER} has ${MAX_FOLLOWS_PER_USER} log follows in progress, the most one user other than root may` });
    claimed(a.claim('read', MEMBER));
    expect([a.held('follow'), a.held('read')]).toEqual([MAX_FOLLOWS_PER_USER, 1]);
  });

  it('keeps at least one slot for others under a tiny total', () => {
    const a = new LogCallAdmission({ reads: { total: 1 } });
    claimed(a.claim('read', MEMBER));
  });
});
