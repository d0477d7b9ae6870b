import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { checkDeploymentPlaceable } from '../../src/control/check-deployment-placeable.js';
import { parseDeployment } from '../../src/control/load-deployment.js';
import type { PlacementNode } from '../../src/control/place-replica.js';
import { GpuSchema } from '../../src/gen/llmgw/v1/agent_pb.js';

const replicas = (count: number) =>
  parseDeployment(`profiles:\n  p:\n    engine: sim\n    model: m\nreplicas:\n  - name: r\n    profile: p\n    count: ${count}\n    gpus_per_shard: 1\n`, 'p.yaml').replicas;

/** Eight GPUs; 3 and 4 with memory no process holds, 6 unhealthy. */
const node: PlacementNode = {
  id: 'n',
  labels: {},
  gpus: Array.from({ length: 8 }, (_, index) =>
    create(GpuSchema, { index, uuid: `GPU-${index}`, computeCapability: '9.0', healthy: index !== 6, memoryTotalMb: 81559, memoryUsedMb: index === 3 || index === 4 ? 71480 : 4 }),
  ),
  // A GPU in use now does not count: the question is whether the deployment can fit at all.
  usedGpus: new Set([0, 1]),
  processes: [],
};

describe('checkDeploymentPlaceable', () => {
  it('places replicas one after another by placeReplica and names the first that does not fit, with its reason', () => {
    expect(checkDeploymentPlaceable(replicas(5), [node])).toBeUndefined();
    expect(checkDeploymentPlaceable(replicas(6), [node])).toEqual({
      replicaId: 'r-5',
      placedBefore: 5,
      reason: 'needs 1 node(s) with 1 free healthy GPU(s); 0 of the connected nodes have that (left out, their memory used by no process the node lists: n GPU 3, 4)',
    });
  });
});
