import { describe, expect, it } from 'vitest';
import { type Admitted, ConnectionAdmission } from '../../../src/agent/admin/connection-admission.js';

const as = (uid: number) => ({ pid: 1000 + uid, uid, gid: uid });
const admitted = (r: ReturnType<ConnectionAdmission['admit']>): r is Admitted => 'release' in r;

describe('ConnectionAdmission', () => {
  it('lets one user other than root hold its share and no more, and that user again once one closes', () => {
    const a = new ConnectionAdmission({ maxConnections: 100, rootReserved: 10, perUser: 3 });
    const held = [a.admit(as(1000)), a.admit(as(1000)), a.admit(as(1000))];
    expect(held.every(admitted)).toBe(true);
    expect(a.admit(as(1000))).toEqual({
      peer: as(1000),
      code: 'resource_exhausted',
      why: 'uid 1000 holds 3 connections, the most one user other than root may',
      action: 'end other ctl calls or scripts on its socket and try again',
    });
    // Another user is not held back by the first.
    expect(admitted(a.admit(as(1001)))).toBe(true);
    const first = held[0];
    if (first && admitted(first)) {
      first.release();
      first.release();
    }
    expect(a.size).toBe(3);
    expect(admitted(a.admit(as(1000)))).toBe(true);
  });

  it('keeps the reserve for root: others stop at the cap less the reserve, root goes on to the cap', () => {
    const a = new ConnectionAdmission({ maxConnections: 16, rootReserved: 2, perUser: 100 });
    for (let i = 0; i < 14; i++) expect(admitted(a.admit(as(1000 + i)))).toBe(true);
    expect(a.admit(as(2000))).toMatchObject({ why: '14 connections are open, the most users other than root may hold (2 are kept for root)' });
    expect(admitted(a.admit(as(0)))).toBe(true);
    expect(admitted(a.admit(as(0)))).toBe(true);
    expect(a.admit(as(0))).toMatchObject({ why: '16 connections are open, the most there may be' });
  });

  it('refuses a peer whose uid cannot be read, with room to spare, and counts it nowhere (review 2, N8)', () => {
    const a = new ConnectionAdmission({ maxConnections: 16, rootReserved: 2, perUser: 3 });
    const refused = a.admit({ unknown: 'getsockopt(SO_PEERCRED) failed with errno 1' });
    expect(refused).toMatchObject({
      peer: undefined,
      code: 'permission_denied',
      why: 'it cannot read which user connected (getsockopt(SO_PEERCRED) failed with errno 1), so it lets no one in rather than run without its per-user limits',
    });
    expect(a.size).toBe(0);
    // Credentials that are read are judged as before.
    expect(admitted(a.admit(as(0)))).toBe(true);
    expect(admitted(a.admit(as(1000)))).toBe(true);
  });

  it('never reserves more than an eighth of a small cap', () => {
    const a = new ConnectionAdmission({ maxConnections: 4 });
    for (let i = 0; i < 4; i++) expect(admitted(a.admit(as(1000 + i)))).toBe(true);
    expect(admitted(a.admit(as(0)))).toBe(false);
  });
});
