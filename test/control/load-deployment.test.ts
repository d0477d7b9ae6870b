import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DEFAULT_ALLOWED_ENV, refuseProfileEnv } from '../../src/agent/config/env-allowlist.js';
import { loadDeployment, parseDeployment } from '../../src/control/load-deployment.js';
import { LlmgwError } from '../../src/lib/errors.js';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-deployment-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function errorOf(text: string): LlmgwError {
  const path = join(dir, 'd.yaml');
  writeFileSync(path, text);
  try {
    loadDeployment(path);
  } catch (err) {
    expect(err).toBeInstanceOf(LlmgwError);
    expect((err as LlmgwError).exitCode).toBe(78);
    return err as LlmgwError;
  }
  throw new Error('loaded without error');
}

const PROFILE = `profiles:
  p:
    engine: sim
    model: m
`;

describe('loadDeployment', () => {
  it('loads examples/deployment.yaml: two one-GPU sim replicas', () => {
    const d = loadDeployment('examples/deployment.yaml');
    expect(d.replicas.map((r) => r.id)).toEqual(['tiny-0', 'tiny-1']);
    expect(d.replicas[0]).toMatchObject({ gpusPerShard: 1, nnodes: 1, pool: '', profile: { engine: 'sim', servedModelName: 'tiny-chat', startupTimeoutMs: 120_000 } });
  });

  it("sets in examples/deployment.yaml only profile env that an agent's default allowlist lets through", () => {
    const profiles = loadDeployment('examples/deployment.yaml').replicas.map((r) => r.profile);
    const env = profiles.flatMap((p) => Object.keys(p.env).map((name) => [p.engine, name] as const));
    expect(env.length).toBeGreaterThan(0);
    expect(env.map(([engine, name]) => refuseProfileEnv(name, DEFAULT_ALLOWED_ENV, engine)).filter((why) => why !== undefined)).toEqual([]);
  });

  it('expands explicit ids and fills defaults', () => {
    const d = parseDeployment(`${PROFILE}replicas:\n  - name: g\n    profile: p\n    ids: [alpha, beta]\n`, 'x.yaml');
    expect(d.replicas.map((r) => r.id)).toEqual(['alpha', 'beta']);
    expect(d.replicas[0]?.profile).toMatchObject({ servedModelName: 'm', tensorParallelSize: 1, startupTimeoutMs: 600_000, minComputeCapability: '' });
  });

  it('names file and line of an unknown key, with a guess', () => {
    const e = errorOf(`${PROFILE}    startup_timout: 5m\nreplicas: []\n`);
    expect(e.message).toBe(`profiles.p.startup_timout: unknown key; did you mean startup_timeout? (${join(dir, 'd.yaml')}:5)`);
  });

  it('names file and line of a replica that refers to an unknown profile', () => {
    const e = errorOf(`${PROFILE}replicas:\n  - name: r\n    profile: q\n`);
    expect(e.message).toMatch(/^replicas\.r\.profile: unknown profile "q"; .*\(.*d\.yaml:7\)$/);
  });

  it('names file and line of a duration that is not one', () => {
    const e = errorOf(`${PROFILE}    startup_timeout: 300\nreplicas: []\n`);
    expect(e.message).toMatch(/^profiles\.p\.startup_timeout: number 300 is not a duration; .*d\.yaml:5\)$/);
  });

  it('refuses GPUs that do not add up to tensor x pipeline parallel size', () => {
    const e = errorOf(`${PROFILE}    tensor_parallel_size: 4\nreplicas:\n  - name: r\n    profile: p\n    gpus_per_shard: 2\n`);
    expect(e.message).toMatch(/^replicas\.r\.gpus_per_shard: 2 GPUs on each of 1 node\(s\) is 2, but profile p needs .* = 4 \(.*d\.yaml:9\)$/);
  });

  it("counts a vLLM profile's --data-parallel-size in the GPUs a replica needs (a DP rank holds tp x pp), and only vLLM's", () => {
    const dp = (engine: string, gpus: number) =>
      `profiles:\n  p:\n    engine: ${engine}\n    model: org/m\n    args: [--data-parallel-size, "2"]\nreplicas:\n  - name: r\n    profile: p\n    nnodes: 2\n    gpus_per_shard: ${gpus}\n`;
    expect(parseDeployment(dp('vllm', 1), 'd.yaml').replicas[0]).toMatchObject({ nnodes: 2, gpusPerShard: 1 });
    expect(errorOf(dp('vllm', 2)).message).toMatch(/is 4, but profile p needs tensor_parallel_size x pipeline_parallel_size x --data-parallel-size = 2 /);
    expect(errorOf(dp('sglang', 1)).message).toMatch(/is 2, but profile p needs tensor_parallel_size x pipeline_parallel_size = 1 /);
  });

  it('refuses an unknown engine and a replica id twice', () => {
    expect(errorOf(`profiles:\n  p:\n    engine: vlm\n    model: m\nreplicas: []\n`).message).toMatch(/unknown engine "vlm"; did you mean vllm\? .*d\.yaml:3\)$/);
    expect(errorOf(`${PROFILE}replicas:\n  - {name: a, profile: p}\n  - {name: b, profile: p, ids: [a-0]}\n`).message).toMatch(
      /replica id a-0 is already used by replicas\[0\] .*d\.yaml:7\)$/,
    );
  });

  it('reports a YAML syntax error with its line, and a missing file', () => {
    expect(errorOf(`${PROFILE}replicas:\n  - name: [\n`).message).toMatch(/^cannot parse deployment .*d\.yaml:\d+: /);
    expect(() => loadDeployment(join(dir, 'none.yaml'))).toThrow(/cannot read deployment .*none\.yaml: no such file/);
  });
});
