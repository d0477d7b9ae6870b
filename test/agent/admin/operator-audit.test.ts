import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { type HandlerContext, createContextValues } from '@connectrpc/connect';
import { afterAll, describe, expect, it } from 'vitest';
import { ClearGpuFaultRequestSchema, SleepRequestSchema, WakeRequestSchema } from '../../../src/gen/llmgw/v1/admin_pb.js';
import { type AdminBackend, type OperatorAct, adminBackend } from '../../../src/agent/admin/admin-backend.js';
import { ADMIN_PEER } from '../../../src/agent/admin/admin-peer.js';
import { type AdminAccess, peerGroups, roleOf } from '../../../src/agent/admin/admin-role.js';
import { clearGpuFault } from '../../../src/agent/admin/clear-gpu-fault.js';
import { sleepRoute, wakeRoute } from '../../../src/agent/admin/sleep-route.js';
import { AgentEventRing } from '../../../src/agent/events/agent-event-ring.js';

/*
 * Security review 4, F8: the uid of each change asked on the admin socket is
 * the kernel's (SO_PEERCRED), recorded before the change; and who is a
 * reader or an admin is judged by the peer's groups.
 */

const ctxOf = (uid: number) => ({ values: createContextValues().set(ADMIN_PEER, { pid: 1, uid, gid: uid }) }) as unknown as HandlerContext;

describe('the audit of operator changes', () => {
  const acts: OperatorAct[] = [];
  const backend = {
    nodeId: 'n',
    shard: (id: string) => (id === 's1' ? { shardId: 's1' } : undefined),
    shards: () => [],
    sleepShard: async () => ({ refused: 'sleep refused: the profile has no sleep_mode' }),
    wakeShard: async () => ({ refused: 'wake refused: the shard is not asleep' }),
    clearGpuFault: () => ({ cleared: [] }),
    audit: (a: OperatorAct) => acts.push(a),
  } as unknown as AdminBackend;

  it('names the caller of a sleep, a wake and a gpu clear by its uid, also when the change is then refused', async () => {
    await expect(sleepRoute(backend, create(SleepRequestSchema, { shardId: 's1', level: 2 }), ctxOf(65533))).rejects.toThrow('sleep refused');
    await expect(wakeRoute(backend, create(WakeRequestSchema, { shardId: 's1' }), ctxOf(65533))).rejects.toThrow('wake refused');
    clearGpuFault(backend, create(ClearGpuFaultRequestSchema, { gpuIndex: 3, reason: 'reseated' }), ctxOf(1001));
    expect(acts).toEqual([
      { act: 'sleep', shardId: 's1', detail: 'level 2', uid: 65533 },
      { act: 'wake', shardId: 's1', uid: 65533 },
      { act: 'gpu clear', gpu: 3, detail: 'reseated', uid: 1001 },
    ]);
  });

  it('records nothing for a request refused at the edge (an unknown shard, a bad level): no change was asked of anything', async () => {
    acts.length = 0;
    await expect(sleepRoute(backend, create(SleepRequestSchema, { shardId: 'nope', level: 1 }), ctxOf(1))).rejects.toThrow();
    await expect(sleepRoute(backend, create(SleepRequestSchema, { shardId: 's1', level: 3 }), ctxOf(1))).rejects.toThrow('sleep level 3');
    expect(acts).toEqual([]);
  });

  it('goes into the events ctl events shows and into the log', () => {
    const events = new AgentEventRing();
    const lines: unknown[] = [];
    const logger = { info: (fields: unknown, msg: string) => lines.push({ fields, msg }) };
    const b = adminBackend({ events, logger, node: {}, view: {}, supervisor: {}, commands: {}, recovery: {} } as unknown as Parameters<typeof adminBackend>[0]);
    b.audit?.({ act: 'sleep', shardId: 's1', detail: 'level 1', uid: 65533 });
    expect(events.list()).toMatchObject([{ kind: 'shard', shardId: 's1', message: 'ctl sleep s1 (level 1) asked by uid 65533', fields: { uid: '65533', act: 'sleep', detail: 'level 1' } }]);
    expect(lines).toEqual([{ fields: { uid: 65533, act: 'sleep', shard: 's1', gpu: undefined, detail: 'level 1' }, msg: 'an operator asked a change over the admin socket' }]);
  });
});

describe('roleOf: the tier of a peer by its groups', () => {
  const proc = mkdtempSync(join(tmpdir(), 'llmgw-proc-'));
  afterAll(() => rmSync(proc, { recursive: true, force: true }));
  const status = (pid: number, uid: number, groups: number[]) => {
    mkdirSync(join(proc, String(pid)), { recursive: true });
    writeFileSync(join(proc, String(pid), 'status'), `Name:\tctl\nUid:\t${uid}\t${uid}\t${uid}\t${uid}\nGid:\t${uid}\t${uid}\t${uid}\t${uid}\nGroups:\t${groups.join(' ')} \n`);
  };
  const access: AdminAccess = { adminGid: 100, readGid: 50, adminGroup: 'users', readGroup: 'staff', procRoot: proc };

  it('finds a supplementary group in /proc/<pid>/status, and the primary gid alone', () => {
    status(10, 1001, [4, 50]);
    expect(peerGroups({ pid: 10, uid: 1001, gid: 1001 }, proc)).toEqual([1001, 4, 50]);
    expect(roleOf({ pid: 10, uid: 1001, gid: 1001 }, access)).toBe('read');
    status(11, 1002, [50, 100]);
    expect(roleOf({ pid: 11, uid: 1002, gid: 1002 }, access)).toBe('admin');
    expect(roleOf({ pid: 0, uid: 1003, gid: 50 }, access)).toBe('read');
    status(12, 1004, []);
    expect(roleOf({ pid: 12, uid: 1004, gid: 1004 }, access)).toBeUndefined();
  });

  it('trusts no group of a pid that now names another user (the peer exited and its pid was reused)', () => {
    status(13, 4242, [100]);
    expect(roleOf({ pid: 13, uid: 1005, gid: 1005 }, access)).toBeUndefined();
  });

  it('keeps root an admin, and without a read tier everyone the socket let in (the file system decided)', () => {
    expect(roleOf({ pid: 99, uid: 0, gid: 0 }, access)).toBe('admin');
    expect(roleOf({ pid: 99, uid: 1006, gid: 1006 }, { ...access, readGid: undefined })).toBe('admin');
    expect(roleOf({ pid: 99, uid: 1006, gid: 1006 }, undefined)).toBe('admin');
  });
});
