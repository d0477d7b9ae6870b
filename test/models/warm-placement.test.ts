import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { cachedModelsView } from '../../src/agent/models/cached-models.js';
import { parseDeployment } from '../../src/control/load-deployment.js';
import { type PlacementNode, placeReplica } from '../../src/control/place-replica.js';
import { profileModelKey, warmModels } from '../../src/control/warm-models.js';
import { CachedModelSchema, GpuSchema, InventorySchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import type { StoredModel } from '../../src/models/scan-store.js';

/*
 * Placement prefers a warm node (issue 30): among nodes that fit as well, one
 * whose store holds the replica's model complete at its revision. The agent
 * side (Inventory.cached_models from a real store) is warm-start-agent.test.ts.
 */

const replica = (args = '') =>
  parseDeployment(`profiles:\n  p:\n    engine: sim\n    model: acme/tiny\n${args}replicas:\n  - name: r\n    profile: p\n`, 'p.yaml').replicas[0]!;

const node = (id: string, cached: { repo: string; revision: string; complete: boolean }[], used: number[] = []): PlacementNode => ({
  id,
  labels: {},
  gpus: [0, 1, 2, 3].map((index) => create(GpuSchema, { index, computeCapability: '9.0', healthy: true })),
  usedGpus: new Set(used),
  warmModels: warmModels(create(InventorySchema, { cachedModels: cached.map((c) => create(CachedModelSchema, c)) })),
});

describe('placement and the nodes\' model stores', () => {
  it('puts a replica on the node that has its model complete, whatever the node ids say', () => {
    const nodes = [node('a', []), node('b', [{ repo: 'acme/tiny', revision: 'main', complete: true }])];
    expect(placeReplica(replica(), nodes)).toMatchObject({ ok: true, shards: [{ nodeId: 'b' }] });
  });

  it('does not count a partial model, or the model at another revision, as warm', () => {
    const nodes = [node('a', []), node('b', [{ repo: 'acme/tiny', revision: 'main', complete: false }, { repo: 'acme/tiny', revision: 'v2', complete: true }])];
    expect(placeReplica(replica(), nodes)).toMatchObject({ ok: true, shards: [{ nodeId: 'a' }] });
    expect(placeReplica(replica('    args: [--revision, v2]\n'), nodes)).toMatchObject({ ok: true, shards: [{ nodeId: 'b' }] });
  });

  it('keeps best fit first: warmth only breaks ties between nodes that fit as well', () => {
    // a is fuller (2 free GPUs against 4): best fit keeps it first, warm b or not.
    const nodes = [node('a', [], [0, 1]), node('b', [{ repo: 'acme/tiny', revision: 'main', complete: true }])];
    expect(placeReplica(replica(), nodes)).toMatchObject({ ok: true, shards: [{ nodeId: 'a' }] });
  });

  it('reads a profile\'s revision as the agent does', () => {
    expect(profileModelKey({ model: 'o/m', args: [] })).toBe('o/m@main');
    expect(profileModelKey({ model: 'o/m', args: ['--revision', 'v1'] })).toBe('o/m@v1');
    expect(profileModelKey({ model: 'o/m', args: ['--revision=abc'] })).toBe('o/m@abc');
  });

  it('lists every pulled revision of a stored model, complete only where its commit is, and the budget left', () => {
    const m: StoredModel = {
      repo: 'acme/tiny',
      refs: { main: 'c1', v2: 'c2' },
      completeCommits: ['c1'],
      complete: false,
      subset: false,
      bytes: 1000,
      partialBytes: 10,
      lastUsedMs: 1_700_000_000_123.75,
      pins: [],
      pulling: true,
    };
    const view = cachedModelsView([m, { ...m, repo: 'acme/bare', refs: {}, completeCommits: [], bytes: 500 }], 4000);
    expect(view.cachedModels.map((c) => [c.repo, c.revision, c.complete, c.bytes])).toEqual([
      ['acme/tiny', 'main', true, 1000n],
      ['acme/tiny', 'v2', false, 1000n],
      ['acme/bare', '', false, 500n],
    ]);
    // Whole milliseconds: a fraction in Timestamp.nanos cannot be encoded, and killed the stream once.
    expect(view.cachedModels[0]?.lastUsed?.nanos).toBe(123_000_000);
    expect(view.freeBytes).toBe(2500n);
  });
});
