import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { parseDeployment } from '../../src/control/load-deployment.js';
import { prefetchForNode } from '../../src/control/prefetch-for-node.js';
import { startShardMessage } from '../../src/control/start-shard-message.js';
import { CachedModelSchema, InventorySchema, RegisterSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { LlmgwError } from '../../src/lib/errors.js';

/*
 * A profile's sleep_mode and prefetch (issue 39): what the deployment says,
 * what the refusals say, and the PrefetchModels the reference control plane
 * sends a node when it registers.
 */
const yaml = (profile: string, pool = '') => `profiles:
  p:
    engine: vllm
    model: org/chat
    args: [--revision, v2]
${profile}replicas:
  - name: r
    profile: p
    pool: "${pool}"
`;

const register = (labels: Record<string, string>, cached: { bytes: number; complete: boolean; resident: number }[] = []) =>
  create(RegisterSchema, {
    nodeId: 'n',
    labels,
    inventory: create(InventorySchema, { cachedModels: cached.map((c) => create(CachedModelSchema, { repo: 'org/chat', revision: 'v2', bytes: BigInt(c.bytes), complete: c.complete, residentBytes: BigInt(c.resident) })) }),
  });

describe("a profile's sleep_mode and prefetch", () => {
  it('reach StartShard (sleep_mode) and the node (prefetch: the model at its revision, page_cache for page-cache)', () => {
    const d = parseDeployment(yaml('    sleep_mode: true\n    prefetch: page-cache\n'), 'd.yaml');
    const r = d.replicas[0];
    if (!r) throw new Error('no replica');
    expect(r.profile).toMatchObject({ sleepMode: true, prefetch: 'page-cache' });
    const start = startShardMessage({ shardId: 'r-0-g1-r0', replicaId: 'r-0', rank: 0, nnodes: 1, nodeId: 'n', gpuIndices: [0], httpPort: 1, leaderAddr: '', leaderPort: 0, generation: 1, state: 0, error: '', exitCode: 0, adopted: false }, r);
    expect(start.profile?.sleepMode).toBe(true);
    expect(prefetchForNode(d, register({}))).toMatchObject([{ repo: 'org/chat', revision: 'v2', pageCache: true }]);
  });

  it('asks nothing of a node that holds the model (resident, for page-cache), of another pool, or for prefetch: none', () => {
    const pc = parseDeployment(yaml('    prefetch: page-cache\n'), 'd.yaml');
    expect(prefetchForNode(pc, register({}, [{ bytes: 100, complete: true, resident: 100 }]))).toEqual([]);
    expect(prefetchForNode(pc, register({}, [{ bytes: 100, complete: true, resident: 10 }]))).toHaveLength(1);
    const disk = parseDeployment(yaml('    prefetch: disk\n'), 'd.yaml');
    expect(prefetchForNode(disk, register({}, [{ bytes: 100, complete: true, resident: 0 }]))).toEqual([]);
    expect(prefetchForNode(disk, register({}, [{ bytes: 100, complete: false, resident: 0 }]))).toMatchObject([{ pageCache: false }]);
    const pooled = parseDeployment(yaml('    prefetch: disk\n', 'a100'), 'd.yaml');
    expect(prefetchForNode(pooled, register({ pool: 'h100' }))).toEqual([]);
    expect(prefetchForNode(pooled, register({ pool: 'a100' }))).toHaveLength(1);
    expect(prefetchForNode(parseDeployment(yaml(''), 'd.yaml'), register({}))).toEqual([]);
  });

  it.each([
    ['    prefetch: ram\n', /profiles\.p\.prefetch.*must be one of none, disk, page-cache, got string "ram"/],
    ['    sleep_mode: yes please\n', /profiles\.p\.sleep_mode.*must be true or false/],
  ])('refuses %j in one line naming the key', (profile, re) => {
    let err: unknown;
    try {
      parseDeployment(yaml(profile), 'd.yaml');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(LlmgwError);
    expect((err as Error).message).toMatch(re);
  });

  it('refuses prefetch on the sim engine, which reads no model', () => {
    expect(() => parseDeployment('profiles:\n  p:\n    engine: sim\n    model: sim/x\n    prefetch: disk\nreplicas:\n  - name: r\n    profile: p\n', 'd.yaml')).toThrow(/the sim engine reads no model: nothing to prefetch/);
  });
});
