import { toBinary } from '@bufbuild/protobuf';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AgentMessage, AgentMessageSchema, type Register, ShardState, type ShardStatus } from '../../src/gen/llmgw/v1/agent_pb.js';
import { tempAgentDirs } from '../helpers/agent-process.js';
import { freePort, isRunning } from '../helpers/engine-processes.js';
import { freeFakeGpu } from '../helpers/fake-gpus.js';
import { simStart } from '../helpers/sim-shards.js';
import { expectAgentUnharmed } from './agent-unharmed.js';
import { bootAgentAgainst, type HostileControlPlane, startHostileControlPlane } from './hostile-control-plane.js';

/*
 * Finding N6 of the second security review, its second half, against the
 * real agent: an agent from before the field bounds kept a 12 MiB pool in a
 * shard's state file, and every later agent echoed it in Register, which a
 * gRPC control plane (4 MiB) refused for ever. The node never registered
 * again until someone deleted the file; deleting it would have had the
 * healthy engine killed as unidentifiable.
 */

/** A stock gRPC server's limit on a received message (grpc's default max receive length). */
const GRPC_MAX_MESSAGE_BYTES = 4 * 1024 * 1024;
const NODE = 'oldstate-node';
const ID = 'oldstate';

let cp: HostileControlPlane;
beforeAll(async () => {
  cp = await startHostileControlPlane({ readMaxBytes: GRPC_MAX_MESSAGE_BYTES });
});
afterAll(async () => {
  await cp?.close();
});

/** What an agent from before the bounds kept: the spec as the control plane sent it. */
function ageStateFile(path: string): void {
  const file = JSON.parse(readFileSync(path, 'utf8'));
  Object.assign(file.spec, {
    pool: 'p'.repeat(12 * 1024 * 1024),
    fabric: '\u001b]0;owned\u0007ib',
    hcas: ['mlx5_0\u001b[31m', 'x,^=mlx5_1'],
    leaderAddr: '$(reboot)',
  });
  writeFileSync(path, JSON.stringify(file, null, 2));
}

const logs0 = (a: { logs(): Record<string, unknown>[] }) => a.logs();

describe('a state file an older agent wrote with fields StartShard now refuses (security review 2, finding N6)', () => {
  it('is read without them: the agent registers with a gRPC control plane, says which file and fields, and keeps the engine', { timeout: 60_000 }, async () => {
    const dirs = tempAgentDirs('llmgw-sec-oldstate-');
    const first = await bootAgentAgainst(cp, { dirs, nodeId: NODE });
    cp.send({ case: 'start', value: simStart(ID, await freePort(), { gpu: freeFakeGpu(0), args: ['--load-time', '100ms'] }) });
    const ready = (await cp.waitFor((m) => m.msg.case === 'shard' && m.msg.value.shardId === ID && m.msg.value.state === ShardState.READY)).msg.value as ShardStatus;
    const enginePid = ready.pid;
    // The agent dies; the engine serves on, as engines do across agent restarts.
    await first.stop();
    const statePath = join(dirs.stateDir, 'shards', `${ID}.json`);
    ageStateFile(statePath);
    expect(statSync(statePath).size).toBeGreaterThan(12 * 1024 * 1024);

    // Only what the second agent sends counts from here.
    const from = cp.received.length;
    const later = (pred: (m: AgentMessage) => boolean) => cp.waitFor((m) => cp.received.indexOf(m) >= from && pred(m), 30_000);
    const second = await bootAgentAgainst(cp, { dirs, nodeId: NODE });
    const register = await later((m) => m.msg.case === 'register');
    const reg = register.msg.value as Register;
    const bytes = toBinary(AgentMessageSchema, register).length;
    if (process.env.SEC_DEBUG) console.log(`Register after the restart: ${bytes} bytes`);
    expect(bytes).toBeLessThan(64 * 1024);
    const running = reg.runningShards.find((s) => s.shardId === ID);
    expect(running?.pid).toBe(enginePid);
    expect([running?.pool, running?.fabric, running?.hcas, running?.leaderAddr, running?.model]).toEqual(['', '', [], reg.mgmtAddr, 'm']);

    // Adopted and settled like any engine: same process, READY again. An adoption that settled before
    // the stream opened is told by the Register itself (a running shard's state is in runningShards).
    if (running?.state !== ShardState.READY) {
      const adopted = (await later((m) => m.msg.case === 'shard' && m.msg.value.shardId === ID && m.msg.value.state !== ShardState.STARTING)).msg.value as ShardStatus;
      expect([ShardState[adopted.state], adopted.adopted, adopted.pid]).toEqual(['READY', true, enginePid]);
    }
    expect(logs0(second).some((r) => r.msg === 'adopted a running engine')).toBe(true);
    expect(isRunning(enginePid)).toBe(true);
    const logs = second.logs();
    expect(logs.some((r) => String(r.msg).includes('cannot be identified'))).toBe(false);
    const said = logs.filter((r) => r.file === statePath && String(r.msg).startsWith('state file of an older agent holds fields StartShard now refuses'));
    expect(said).toHaveLength(1);
    expect(said[0]?.fields).toBe('pool, fabric, hcas[0], leader_addr, hcas[1]');
    expect(String(said[0]?.why)).toContain('pool is 12582912 bytes; at most 256 are accepted');
    expectAgentUnharmed(second.pid);
  });
});
