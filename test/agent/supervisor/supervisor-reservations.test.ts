import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { StartShardSchema } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { failure } from '../../../src/lib/errors.js';
import { useSupervisors } from '../../helpers/use-supervisors.js';
import { processesWritingUnder } from '../../helpers/engine-processes.js';
import type { ShardLaunch } from '../../../src/agent/supervisor/launch/launch-shard.js';
import { parseShardId, parseStartShard } from '../../../src/lib/shard-id.js';

const harness = useSupervisors();

const worker = (): ShardLaunch => ({ plan: { argv: [process.execPath, '-e', 'setInterval(()=>{},1<<30)'], env: {} }, servesHttp: false });
const spec = (shardId: string, gpuIndices: number[], httpPort = 0) =>
  create(StartShardSchema, { shardId, replicaId: `r-${shardId}`, nnodes: 1, gpuIndices, httpPort, profile: { name: 'p', engine: 'sim', model: 'm' } });

/** A launch source that waits for `gate`: a validation still in progress. */
function gated() {
  let open!: () => void;
  const gate = new Promise<void>((r) => {
    open = r;
  });
  const source = async () => {
    await gate;
    return worker();
  };
  return { open, source };
}

describe('Supervisor reservations', () => {
  it('refuses a second id on a GPU whose first start is still validating, naming the holder', async () => {
    const sup = harness.newSupervisor();
    const first = gated();
    const a = sup.start(parseStartShard(spec('a', [1, 2])), first.source);
    await expect(sup.start(parseStartShard(spec('b', [2])), async () => worker())).rejects.toThrow('GPU 2 is held by shard a');
    first.open();
    await a;
    expect(processesWritingUnder(harness.dirs.logDir)).toHaveLength(1);
  });

  it('refuses a second id on a port whose first start is still validating', async () => {
    const sup = harness.newSupervisor();
    const first = gated();
    const a = sup.start(parseStartShard(spec('a', [0], 18777)), first.source);
    await expect(sup.start(parseStartShard(spec('b', [1], 18777)), async () => worker())).rejects.toThrow('http_port 18777 is already in use on this node by shard a');
    first.open();
    await a;
  });

  it('releases the GPUs and port of a start that validation refused', async () => {
    const sup = harness.newSupervisor();
    await expect(
      sup.start(parseStartShard(spec('a', [3], 18778)), async () => {
        throw failure('refused by validation');
      }),
    ).rejects.toThrow('refused by validation');
    expect([...sup.reservations().gpus]).toEqual([]);
    expect([...sup.reservations().ports]).toEqual([]);
    const b = await sup.start(parseStartShard(spec('b', [3], 18778)), async () => worker());
    expect(b.created).toBe(true);
  });

  it('keeps the GPUs of a running shard reserved until it is stopped and removed', async () => {
    const sup = harness.newSupervisor();
    await sup.start(parseStartShard(spec('a', [4])), async () => worker());
    expect(sup.reservations().gpus.get(4)).toBe('a');
    // Its own id is not its own competitor: a relaunch of "a" must not be refused by "a".
    expect(sup.reservations('a').gpus.get(4)).toBeUndefined();
    await sup.stop(parseShardId('a'), { graceMs: 500 });
    sup.remove(parseShardId('a'));
    expect(sup.reservations().gpus.get(4)).toBeUndefined();
  });

  it('runs at most maxConcurrentLaunches launches at once; the next waits its turn, holding its reservation', async () => {
    const sup = harness.newSupervisor({}, { maxConcurrentLaunches: 2 });
    const g = [gated(), gated()];
    const a = sup.start(parseStartShard(spec('a', [0])), g[0]?.source as () => Promise<ShardLaunch>);
    const b = sup.start(parseStartShard(spec('b', [1])), g[1]?.source as () => Promise<ShardLaunch>);
    let validated = false;
    const c = sup.start(parseStartShard(spec('c', [2])), async () => {
      validated = true;
      return worker();
    });
    await new Promise((r) => setTimeout(r, 100));
    expect(validated).toBe(false);
    // Waiting, it still holds GPU 2.
    await expect(sup.start(parseStartShard(spec('d', [2])), async () => worker())).rejects.toThrow('GPU 2 is held by shard c');
    g[0]?.open();
    expect((await c).created).toBe(true);
    expect(validated).toBe(true);
    g[1]?.open();
    await Promise.all([a, b]);
  });

  it('refuses a start beyond maxPendingLaunches, and a waiting start ends when the supervisor closes', async () => {
    const sup = harness.newSupervisor({}, { maxConcurrentLaunches: 1, maxPendingLaunches: 2 });
    const first = gated();
    const a = sup.start(parseStartShard(spec('a', [0])), first.source);
    const b = sup.start(parseStartShard(spec('b', [1])), async () => worker());
    await expect(sup.start(parseStartShard(spec('c', [2])), async () => worker())).rejects.toThrow(/2 shard starts are in progress already/);
    sup.close();
    await expect(b).rejects.toThrow('the supervisor is closed');
    first.open();
    await expect(a).rejects.toThrow('the supervisor is closed');
  });
});
