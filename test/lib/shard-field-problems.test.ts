import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { StartShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { MAX_HCA_ENTRIES, shardFieldProblems } from '../../src/lib/shard-field-problems.js';

const spec = (over: Omit<MessageInitShape<typeof StartShardSchema>, '$typeName'> = {}) =>
  create(StartShardSchema, { shardId: 's1', replicaId: 'r1', profile: { name: 'p', model: 'org/m', servedModelName: 'm' }, ...over });

describe('shardFieldProblems: the one rule for StartShard, state files and Register (security review 2, N6)', () => {
  it('finds nothing in a spec every field of which fits', () => {
    expect(shardFieldProblems(spec({ pool: 'a', fabric: 'ib-a', leaderAddr: '10.0.0.1', hcas: ['mlx5_0', 'mlx5_1:1'] }))).toEqual([]);
  });

  it('names every field that does not fit, without quoting an oversized or unprintable value', () => {
    const problems = shardFieldProblems(
      spec({ pool: 'p'.repeat(12 * 1024 * 1024), fabric: '\u001b]0;owned\u0007', leaderAddr: '$(reboot)', hcas: ['mlx5_0\u001b[31m', 'x,^=mlx5_1'] }),
    );
    expect(problems).toEqual([
      { field: 'pool', message: 'pool is 12582912 bytes; at most 256 are accepted' },
      { field: 'fabric', message: 'fabric contains the control character \\x1b; use printable text' },
      { field: 'hcas[0]', message: 'hcas[0] contains the control character \\x1b; use printable text' },
      { field: 'leader_addr', message: 'leader_addr "$(reboot)" is neither an IP address nor a hostname' },
      { field: 'hcas[1]', message: 'hcas names "x,^=mlx5_1", which is not an HCA name' },
    ]);
  });

  it('bounds the model at PATH_MAX and the other names at 256 bytes', () => {
    expect(shardFieldProblems(spec({ profile: { model: 'm'.repeat(4096), servedModelName: 's'.repeat(256) } }))).toEqual([]);
    expect(shardFieldProblems(spec({ profile: { model: 'm'.repeat(4097), servedModelName: 's'.repeat(257) } })).map((p) => p.field)).toEqual([
      'profile.model',
      'profile.served_model_name',
    ]);
  });

  it('counts a list of HCAs too long as one problem, with or without the node’s HCAs', () => {
    const many = spec({ hcas: Array.from({ length: 100_000 }, () => 'mlx5_0') });
    expect(shardFieldProblems(many)).toEqual([{ field: 'hcas', message: `hcas lists 100000 entries; at most ${MAX_HCA_ENTRIES} are accepted` }]);
    expect(shardFieldProblems(many, [{ name: 'mlx5_0', port: 1 }])).toEqual([{ field: 'hcas', message: 'hcas lists 100000 entries; this node has 1 HCA port' }]);
  });

  it("with the node's HCAs, takes a device or one of its ports, nothing else", () => {
    const node = [
      { name: 'mlx5_0', port: 1 },
      { name: 'mlx5_1', port: 1 },
    ];
    expect(shardFieldProblems(spec({ hcas: ['mlx5_0', 'mlx5_1:1'] }), node)).toEqual([]);
    expect(shardFieldProblems(spec({ hcas: ['mlx5_1:2'] }), node)).toEqual([
      { field: 'hcas[0]', message: 'hcas names "mlx5_1:2", which is not an HCA of this node (HCAs: mlx5_0, mlx5_1)' },
    ]);
  });
});
