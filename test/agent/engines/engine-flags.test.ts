import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ConfiguredEngine } from '../../../src/agent/engines/configured-engine.js';
import { SglangEngine } from '../../../src/agent/engines/sglang/sglang-engine.js';
import { VllmEngine } from '../../../src/agent/engines/vllm/vllm-engine.js';
import type { StartShard } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { type FakeExecutables, fakeExecutablesOnPath, shard } from './engine-fixtures.js';

// argv[0] is the absolute path the bare default `vllm` resolves to on the
// agent's PATH (a missing one is refused), so the default command needs a
// `vllm` to find; `python3` for SGLang is the machine's own.
let fake: FakeExecutables;
beforeAll(() => {
  fake = fakeExecutablesOnPath(['vllm']);
});
afterAll(() => fake.restore());

/** A flag list from test/fixtures/engines/: one option string a line, after a `#` header. */
function flagSet(file: string): ReadonlySet<string> {
  const text = readFileSync(new URL(`../../fixtures/engines/${file}`, import.meta.url), 'utf8');
  return new Set(
    text
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l !== '' && !l.startsWith('#')),
  );
}

const VLLM_FLAGS = flagSet('vllm-serve-flags.txt');
const SGLANG_FLAGS = flagSet('sglang-server-flags.txt');

/** The option strings in an argv (`--x=v` counts as `--x`), from after the command prefix. */
function optionsIn(argv: readonly string[], prefixLength: number): string[] {
  return argv
    .slice(prefixLength)
    .filter((a) => a.startsWith('-'))
    .map((a) => (a.includes('=') ? a.slice(0, a.indexOf('=')) : a));
}

/** Every emitted option the real parser does not register; [] is the pass. */
function unknownOptions(argv: readonly string[], prefixLength: number, known: ReadonlySet<string>): string[] {
  return optionsIn(argv, prefixLength).filter((o) => !known.has(o));
}

const multiNode = (rank: number, extra: Parameters<typeof shard>[0] = {}) =>
  shard({
    nnodes: 2,
    rank,
    gpuIndices: [0, 1, 2, 3, 4, 5, 6, 7],
    httpPort: rank === 0 ? 8000 : 0,
    leaderAddr: '10.0.0.1',
    leaderPort: 29500,
    ...extra,
    profile: { tensorParallelSize: 8, pipelineParallelSize: 2, ...extra.profile },
  });

/** The profile shapes operators run, each as a StartShard. */
const SHAPES: Record<string, StartShard> = {
  'TP': shard({ gpuIndices: [0, 1], profile: { tensorParallelSize: 2 } }),
  'PP': shard({ gpuIndices: [0, 1, 2, 3, 4, 5, 6, 7], profile: { tensorParallelSize: 4, pipelineParallelSize: 2 } }),
  'multi-node rank 0': multiNode(0),
  'multi-node rank 1': multiNode(1),
  'served name left empty': shard({ profile: { servedModelName: '' } }),
};

describe('the flag sets (test/fixtures/engines)', () => {
  it('hold the real parsers\' options, and not invented ones', () => {
    // Counts from the headers of the lists, so a truncated copy fails here.
    expect(VLLM_FLAGS.size).toBe(389);
    expect(SGLANG_FLAGS.size).toBe(508);
    for (const f of ['--tensor-parallel-size', '--headless', '--shutdown-timeout', '--data-parallel-size-local']) expect(VLLM_FLAGS).toContain(f);
    for (const f of ['--model-path', '--tp-size', '--dist-init-addr', '--enable-metrics']) expect(SGLANG_FLAGS).toContain(f);
    // The checker itself can fail: a flag neither engine has is reported.
    expect(unknownOptions(['vllm', 'serve', 'm', '--no-such-flag', '1', '--port=8000'], 2, VLLM_FLAGS)).toEqual(['--no-such-flag']);
    expect(unknownOptions(['x', '--skip-tokenizer-init', '--shutdown-timeout', '5'], 1, SGLANG_FLAGS)).toEqual(['--shutdown-timeout']);
  });
});

describe.each([
  ['vllm serve', VLLM_FLAGS, (extraArgs: string[]) => new VllmEngine({ command: [], env: {}, extraArgs }, 'eth0'), 2],
  ['sglang.launch_server', SGLANG_FLAGS, (extraArgs: string[]) => new SglangEngine({ command: [], env: {}, extraArgs }, 'eth0'), 3],
] as const)('every flag llmgw gives %s is one its real parser accepts', (_name, known, make, prefixLength) => {
  const engine: ConfiguredEngine = make([]);

  it.each(Object.entries(SHAPES))('%s', (_shape, spec) => {
    const argv = engine.command(spec).argv;
    expect(optionsIn(argv, prefixLength).length).toBeGreaterThan(3);
    expect(unknownOptions(argv, prefixLength, known)).toEqual([]);
  });

  it('with extra_args and profile args around them', () => {
    const withExtras = make(['--max-model-len', '8192']);
    const isVllm = known === VLLM_FLAGS;
    const profileArgs = isVllm ? ['--enable-prefix-caching', '--gpu-memory-utilization=0.9'] : ['--mem-fraction-static', '0.85', '--trust-remote-code'];
    const argv = (isVllm ? withExtras : make(['--context-length', '8192'])).command(shard({ profile: { args: profileArgs } })).argv;
    expect(argv.slice(-2)).toEqual([isVllm ? '--max-model-len' : '--context-length', '8192']);
    expect(unknownOptions(argv, prefixLength, known)).toEqual([]);
  });
});

describe('vllm serve with data parallelism from the profile args', () => {
  const engine = new VllmEngine(undefined, 'eth0');
  const dpShapes: Record<string, StartShard> = {
    'single node, -dp 4': shard({ gpuIndices: [0, 1, 2, 3, 4, 5, 6, 7], profile: { tensorParallelSize: 2, args: ['-dp', '4'] } }),
    'two nodes, rank 0': multiNode(0, { profile: { tensorParallelSize: 2, pipelineParallelSize: 1, args: ['--data-parallel-size', '8'] } }),
    'two nodes, rank 1': multiNode(1, { profile: { tensorParallelSize: 2, pipelineParallelSize: 1, args: ['--data-parallel-size=8'] } }),
  };

  it.each(Object.entries(dpShapes))('%s: every flag is one vLLM accepts', (_shape, spec) => {
    expect(unknownOptions(engine.command(spec).argv, 2, VLLM_FLAGS)).toEqual([]);
  });
});
