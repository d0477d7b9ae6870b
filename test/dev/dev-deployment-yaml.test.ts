import { describe, expect, it } from 'vitest';
import { parseDeployment } from '../../src/control/load-deployment.js';
import { checkDeploymentFitsOneNode, devDeploymentYaml } from '../../src/dev/dev-deployment-yaml.js';

describe('devDeploymentYaml', () => {
  it('generates N sim replicas of one GPU each on one node, with a short load time', () => {
    const d = parseDeployment(devDeploymentYaml({ replicas: 3, engine: 'sim' }), 'generated');
    expect(d.replicas.map((r) => [r.id, r.gpusPerShard, r.nnodes, r.profile.engine])).toEqual([
      ['tiny-0', 1, 1, 'sim'],
      ['tiny-1', 1, 1, 'sim'],
      ['tiny-2', 1, 1, 'sim'],
    ]);
    expect(d.replicas[0]?.profile).toMatchObject({ servedModelName: 'tiny-chat', args: ['--load-time', '1s'], startupTimeoutMs: 60_000 });
  });
});

describe('checkDeploymentFitsOneNode', () => {
  const deployment = (replicaYaml: string) =>
    parseDeployment(`profiles:\n  p:\n    engine: sim\n    model: m\n    pipeline_parallel_size: 2\nreplicas:\n${replicaYaml}`, 'd.yaml');

  it('refuses a replica over two nodes, naming it and what to run instead (exit 78)', () => {
    const d = deployment('  - name: big\n    profile: p\n    nnodes: 2\n');
    expect(() => checkDeploymentFitsOneNode(d, 8, 'd.yaml')).toThrow(
      'replica big-0 in d.yaml spans 2 nodes, and dev up runs one agent; run llmgw dev control-plane with one agent per node instead',
    );
    try {
      checkDeploymentFitsOneNode(d, 8, 'd.yaml');
    } catch (err) {
      expect((err as { exitCode: number }).exitCode).toBe(78);
    }
  });

  it('refuses a deployment that needs more GPUs than the node has', () => {
    const d = deployment('  - name: wide\n    profile: p\n    count: 3\n    gpus_per_shard: 2\n');
    expect(() => checkDeploymentFitsOneNode(d, 4, 'd.yaml')).toThrow('d.yaml needs 6 GPUs and this node has 4; lower the replica count or gpus_per_shard');
  });
});
