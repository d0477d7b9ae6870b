import { EventEmitter } from 'node:events';
import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import type { ControlPlane } from '../../src/control/control-plane.js';
import type { ReplicaView } from '../../src/control/replica-view.js';
import { watchReplicas } from '../../src/dev/watch-replicas.js';
import { ShardState, ShardStatusSchema } from '../../src/gen/llmgw/v1/agent_pb.js';

/*
 * dev up's watch of its replicas, on the control plane's own events: a
 * failure before the banner counts in the replica's streak and is said once
 * the banner is out (a loaded machine can print the banner after the first
 * failures of an engine that dies a second after READY); an orderly stop is
 * never a failure.
 */

const replica = (generation: number, url: string) => ({ id: 'flaky-0', url, generation, servedModelName: 'flaky', shards: [{ shardId: `flaky-0-g${generation}-r0` }] }) as unknown as ReplicaView;
const failed = (generation: number, state = ShardState.FAILED) => create(ShardStatusSchema, { replicaId: 'flaky-0', shardId: `flaky-0-g${generation}-r0`, state, exitCode: 3 });

function watched() {
  const cp = new EventEmitter();
  const said: string[] = [];
  const w = watchReplicas(cp as unknown as ControlPlane, { logDir: '/logs', say: (l) => said.push(l) });
  return { cp, said, w };
}

describe('watchReplicas', () => {
  it('holds the lines of failures before the banner, says them after it, and counts them in the streak', () => {
    const { cp, said, w } = watched();
    cp.emit('replica-ready', replica(1, 'http://127.0.0.1:1'));
    cp.emit('shard-status', 'n', failed(1));
    cp.emit('replica-ready', replica(2, 'http://127.0.0.1:2'));
    expect(said).toEqual([]);
    w.printed([replica(2, 'http://127.0.0.1:2')]);
    expect(said).toEqual(['flaky-0: shard flaky-0-g1-r0 FAILED (exit status 3); the control plane places it again']);
    cp.emit('shard-status', 'n', failed(2));
    cp.emit('shard-status', 'n', failed(3, ShardState.EXITED));
    expect(said.at(-1)).toBe('flaky-0 is crash-looping: 3 failures in a row, the last with exit status 3; its log: /logs/shards/flaky-0-g3-r0.log');
    cp.emit('shard-status', 'n', failed(4));
    expect(said.filter((l) => l.includes('is crash-looping'))).toHaveLength(1);
    w.stop();
  });

  it('says nothing of an orderly stop, nor of a replica ready at the URL the banner printed', () => {
    const { cp, said, w } = watched();
    w.printed([replica(1, 'http://127.0.0.1:1')]);
    cp.emit('replica-ready', replica(1, 'http://127.0.0.1:1'));
    cp.emit('shard-status', 'n', failed(1, ShardState.STOPPED));
    expect(said).toEqual([]);
    cp.emit('replica-ready', replica(2, 'http://127.0.0.1:9'));
    expect(said[0]).toBe('flaky-0 moved: now http://127.0.0.1:9 (was http://127.0.0.1:1), generation 2, shard flaky-0-g2-r0:');
    w.stop();
    cp.emit('shard-status', 'n', failed(2));
    expect(said).toHaveLength(2);
  });
});
