import { create } from '@bufbuild/protobuf';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AgentMessage, ShardState, type StartShard, StartShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { agentDirs, cleanUpEnginesAfterTest, startAgentProcess } from '../helpers/agent-process.js';
import { expectAgentUnharmed } from './agent-unharmed.js';
import { type HostileControlPlane, startHostileControlPlane } from './hostile-control-plane.js';

/*
 * Finding 1 of the security review, against the real agent: a control plane
 * (or whoever impersonates it) turns profile.env into root code execution.
 * Every payload below writes a marker file when it runs; with the allowlist
 * each StartShard is refused at validation, naming the variable, and no
 * marker exists afterwards. A fake `vllm` and `python3` on the agent's PATH
 * record the environment they were started with, so the one allowed start
 * proves the engines really run (the test can fail).
 */

const root = mkdtempSync(join(tmpdir(), 'llmgw-sec-env-'));
const markers = join(root, 'markers');
const goodBin = join(root, 'bin');
const evilBin = join(root, 'evilbin');
let cp: HostileControlPlane;

/**
 * A Python `vllm`/`python3`: Python is what PYTHONWARNINGS + BROWSER attack.
 * It records its env and argv, then exits. The interpreter is named by its
 * absolute path: `env python3` would find the fake python3 itself.
 */
const PYTHON = execFileSync('python3', ['-c', 'import sys; print(sys.executable)'], { encoding: 'utf8' }).trim();
const RECORDER = (name: string) => `#!${PYTHON}
import json, os, sys
path = ${JSON.stringify(`${markers}/`)} + ${JSON.stringify(name)} + '-' + os.environ.get('CUDA_VISIBLE_DEVICES', 'x') + '.json'
# Written aside and renamed: the test reads the record as soon as it exists.
with open(path + '.tmp', 'w') as f:
    json.dump({'argv': sys.argv, 'env': dict(os.environ)}, f)
os.rename(path + '.tmp', path)
`;

beforeAll(async () => {
  mkdirSync(markers, { recursive: true });
  mkdirSync(goodBin, { recursive: true });
  mkdirSync(evilBin, { recursive: true });
  writeFileSync(join(goodBin, 'vllm'), RECORDER('vllm'), { mode: 0o755 });
  writeFileSync(join(goodBin, 'python3'), RECORDER('python3'), { mode: 0o755 });
  writeFileSync(join(evilBin, 'vllm'), `#!/bin/sh\nid > ${join(markers, 'pwned-path')}\n`, { mode: 0o755 });
  cp = await startHostileControlPlane();
});
afterAll(async () => {
  await cp?.close();
  if (!process.env.SEC_DEBUG) rmSync(root, { recursive: true, force: true });
});

function start(shardId: string, engine: string, env: Record<string, string>, gpu: number): StartShard {
  return create(StartShardSchema, {
    shardId,
    replicaId: `r-${shardId}`,
    nnodes: 1,
    gpuIndices: [gpu],
    httpPort: 19100 + gpu,
    profile: { name: 'p', engine, model: 'm', servedModelName: 'm', tensorParallelSize: 1, env, args: engine === 'sim' ? ['--load-time', '100ms'] : [] },
  });
}

const finalStatus = (id: string) => (m: AgentMessage) =>
  m.msg.case === 'shard' && m.msg.value.shardId === id && [ShardState.FAILED, ShardState.READY, ShardState.EXITED].includes(m.msg.value.state);

afterAll(() => {
  if (process.env.SEC_DEBUG) for (const m of cp.received) if (m.msg.case === 'shard') console.log(m.msg.value.shardId, ShardState[m.msg.value.state], m.msg.value.error);
});

function bootAgent(name: string, opts: { simEnabled?: boolean } = {}) {
  const dirs = agentDirs(join(root, name));
  cleanUpEnginesAfterTest(dirs);
  const agent = startAgentProcess({
    server: cp.url,
    dirs,
    nodeId: name,
    simEnabled: opts.simEnabled,
    env: { PATH: `${goodBin}${delimiter}${process.env.PATH ?? ''}` },
  });
  return { agent, dirs };
}

async function refusalOf(spec: StartShard): Promise<string> {
  cp.send({ case: 'start', value: spec });
  const m = await cp.waitFor(finalStatus(spec.shardId));
  const status = m.msg.value as { state: ShardState; error: string };
  expect(ShardState[status.state]).toBe('FAILED');
  return status.error;
}

describe('a hostile control plane cannot run code through profile.env', () => {
  it('refuses NODE_OPTIONS on sim, PYTHONWARNINGS+BROWSER on vllm and sglang, a PATH hijack and LD_PRELOAD, naming each variable', { timeout: 90_000 }, async () => {
    const { agent } = bootAgent('env-node');
    await cp.waitFor((m) => m.msg.case === 'register');
    const nodePayload = `require('fs').writeFileSync(${JSON.stringify(join(markers, 'pwned-node'))}, 'x')`;
    const browser = `/bin/sh -c "id > ${join(markers, 'pwned-python')}" #%s`;
    // Not GPUs 3 and 4 (FREE_FAKE_GPUS): a start there is refused for their foreign memory first.
    const cases: [StartShard, string][] = [
      [start('inj-node', 'sim', { NODE_OPTIONS: `--import=data:text/javascript,${encodeURIComponent(nodePayload)}` }, 0), 'NODE_OPTIONS'],
      [start('inj-py-vllm', 'vllm', { PYTHONWARNINGS: 'ignore::antigravity.x', BROWSER: browser }, 1), 'PYTHONWARNINGS'],
      [start('inj-py-sglang', 'sglang', { BROWSER: browser, PYTHONWARNINGS: 'ignore::antigravity.x' }, 2), 'BROWSER'],
      [start('inj-path', 'vllm', { PATH: `${evilBin}:/usr/bin:/bin` }, 1), 'PATH'],
      [start('inj-preload', 'vllm', { LD_PRELOAD: join(root, 'evil.so') }, 2), 'LD_PRELOAD'],
      [start('inj-order', 'vllm', { CUDA_DEVICE_ORDER: 'FASTEST_FIRST' }, 5), 'CUDA_DEVICE_ORDER'],
    ];
    for (const [spec, name] of cases) {
      expect(await refusalOf(spec)).toMatch(new RegExp(`^shard ${spec.shardId}: profile env sets ${name}, which`));
    }

    // The control: an allowed variable on vllm runs the engine the agent
    // resolved with its own PATH, by absolute path, with the agent's GPU order.
    cp.send({ case: 'start', value: start('allowed', 'vllm', { HF_TOKEN: 'hf_x', VLLM_LOGGING_LEVEL: 'DEBUG' }, 6) });
    const record = join(markers, 'vllm-6.json');
    await expect.poll(() => existsSync(record), { timeout: 30_000 }).toBe(true);
    const ran = JSON.parse(readFileSync(record, 'utf8')) as { argv: string[]; env: Record<string, string> };
    expect(ran.argv[0]).toBe(join(goodBin, 'vllm'));
    expect(ran.env.HF_TOKEN).toBe('hf_x');
    expect(ran.env.CUDA_VISIBLE_DEVICES).toBe('6');
    expect(ran.env.CUDA_DEVICE_ORDER).toBe('PCI_BUS_ID');
    expect(ran.env.NODE_OPTIONS).toBeUndefined();

    // Nothing a payload would have written exists, and no refused engine ever started.
    for (const f of ['pwned-node', 'pwned-python', 'pwned-path']) expect(existsSync(join(markers, f))).toBe(false);
    for (const gpu of [0, 1, 2, 5, 7]) {
      expect(existsSync(join(markers, `vllm-${gpu}.json`))).toBe(false);
      expect(existsSync(join(markers, `python3-${gpu}.json`))).toBe(false);
    }
    expectAgentUnharmed(agent.pid);
  });

  it('does not register the sim engine unless engines.sim.enabled is true', { timeout: 60_000 }, async () => {
    const { agent } = bootAgent('prod-node', { simEnabled: false });
    await cp.waitFor((m) => m.msg.case === 'register' && m.msg.value.nodeId === 'prod-node');
    const nodePayload = `require('fs').writeFileSync(${JSON.stringify(join(markers, 'pwned-sim-prod'))}, 'x')`;
    const spec = start('prod-sim', 'sim', { NODE_OPTIONS: `--import=data:text/javascript,${encodeURIComponent(nodePayload)}` }, 7);
    spec.profile!.env = {};
    expect(await refusalOf(spec)).toMatch(/engine "sim" is not enabled on this node \(set engines\.sim\.enabled: true/);
    expect(existsSync(join(markers, 'pwned-sim-prod'))).toBe(false);
    expectAgentUnharmed(agent.pid);
  });
});
