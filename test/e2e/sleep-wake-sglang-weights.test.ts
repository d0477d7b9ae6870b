import { create } from '@bufbuild/protobuf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AgentMessage, ShardState, type ShardStatus, SleepShardSchema, WakeShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { type AgentDirs, type AgentProcess, endAgentFixture } from '../helpers/agent-process.js';
import { doubleStart } from '../helpers/double-shards.js';
import { freePort, until } from '../helpers/engine-processes.js';
import { shardIs } from '../helpers/sim-shards.js';
import type { StartedControlPlane } from '../helpers/start-control-plane.js';
import { fakeGpuUsage, gpuUsageDir, startDoubleAgent } from '../helpers/double-agent.js';

/*
 * N1 of review engine-fidelity-2 on SGLang, through the real agent: the
 * double drops the weights at a release unless the engine was started with
 * --enable-weights-cpu-backup (torch_memory_saver core.cpp; load_model_utils.py:281-300),
 * and after the resume answers health checks and garbage alike. The agent
 * starts sleep profiles with the backup, so a woken shard answers as before.
 */

const NODE = 'node-sglang-weights';
const S = ShardState;
const statusOf = (m: AgentMessage) => m.msg.value as ShardStatus;
let cp: StartedControlPlane;
let agent: AgentProcess;
let dirs: AgentDirs;
let usageDir: string;

beforeAll(async () => {
  ({ cp, agent, dirs } = await startDoubleAgent(NODE, 'llmgw-sglang-weights-', [], fakeGpuUsage));
  usageDir = gpuUsageDir(dirs);
});

afterAll(() => endAgentFixture({ agent, cp, dirs }));

async function send(id: string, msg: { case: 'sleep'; level: number } | { case: 'wake' }, state: ShardState): Promise<ShardStatus> {
  const got = cp.cp.waitFor(NODE, (m) => m.msg.case === 'shard' && m.msg.value.shardId === id && (m.msg.value.state === state || m.msg.value.error !== ''), 60_000);
  if (msg.case === 'sleep') cp.cp.send(NODE, { case: 'sleep', value: create(SleepShardSchema, { shardId: id, level: msg.level }) });
  else cp.cp.send(NODE, { case: 'wake', value: create(WakeShardSchema, { shardId: id }) });
  return statusOf(await got);
}

/** A short greedy completion's text. */
async function answer(port: number): Promise<string> {
  const res = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', prompt: 'The capital of France is', max_tokens: 4, temperature: 0 }),
  });
  return ((await res.json()) as { choices: { text: string }[] }).choices[0]?.text ?? '';
}

describe('SGLang sleep keeps the weights (N1)', () => {
  it.each([1, 2])('a READY SGLang shard slept at level %i and woken answers as before the sleep, not garbage', async (level) => {
    const id = `w-${level}`;
    const port = await freePort();
    // Little enough memory that level 1's host-RAM check (weights up to what the GPU held) passes on a test host.
    const spec = doubleStart('sglang', id, port, { gpus: [level], args: ['--sim-gpu-memory', '4000', '--sim-gpu-usage-dir', usageDir] });
    if (spec.profile) spec.profile.sleepMode = true;
    const readyP = cp.cp.waitFor(NODE, shardIs(id, S.READY, S.FAILED), 60_000);
    cp.cp.send(NODE, { case: 'start', value: spec });
    const ready = statusOf(await readyP);
    expect(ready.state, ready.error).toBe(S.READY);
    const before = await answer(port);
    expect(before).not.toMatch(/^!*$/);

    const sleeping = await send(id, { case: 'sleep', level }, S.SLEEPING);
    expect(sleeping.state, sleeping.error).toBe(S.SLEEPING);
    await until(() => agent.logs().some((r) => r.msg === 'shard asleep: GPU memory released' && r.shard === id), `shard ${id} asleep`, 60_000);
    const woken = await send(id, { case: 'wake' }, S.READY);
    expect(woken.state, woken.error).toBe(S.READY);
    expect(await answer(port)).toBe(before);
  });
});
