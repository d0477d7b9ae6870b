import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AgentMessage, ShardState, type ShardStatus, type StartShard, StopShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { type AgentDirs, type AgentProcess, agentDirs, endAgentFixture, startAgentProcess } from '../helpers/agent-process.js';
import { DOUBLE_ENGINES_YAML, doubleStart, streamChat } from '../helpers/double-shards.js';
import { freePort, groupMembers } from '../helpers/engine-processes.js';
import { consumeStream } from '../helpers/fake-engines.js';
import { isRegister, shardIs } from '../helpers/sim-shards.js';
import { type StartedControlPlane, startControlPlane } from '../helpers/start-control-plane.js';

/*
 * The real agent (direct launcher) against the vLLM double where the double
 * is as unkind as vLLM (review engine-fidelity-2 §3 N2, N13): a DP vLLM
 * with its default API servers cuts every stream on SIGTERM, so a stop
 * delivers every token only because the agent runs one API server; and a
 * VLLM_API_KEY the agent was started with reaches the engine, so readiness
 * must send it.
 */

const NODE = 'node-dp';
const S = ShardState;
const statusOf = (m: AgentMessage) => m.msg.value as ShardStatus;
/** The key the agent itself is started with (its unit's Environment=, or the operator's shell). */
const AGENT_KEY = 'sk-llmgw-inherited-7c1e';

let cp: StartedControlPlane;
let agent: AgentProcess;
let dirs: AgentDirs;

beforeAll(async () => {
  cp = await startControlPlane();
  dirs = agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-vllm-dp-')));
  const registered = cp.cp.waitFor(NODE, isRegister, 30_000);
  agent = startAgentProcess({ server: cp.url, dirs, nodeId: NODE, extraYaml: DOUBLE_ENGINES_YAML, env: { VLLM_API_KEY: AGENT_KEY } });
  await registered;
});

afterAll(() => endAgentFixture({ agent, cp, dirs }));

async function startAndWait(spec: StartShard): Promise<ShardStatus> {
  const settled = cp.cp.waitFor(NODE, shardIs(spec.shardId, S.READY, S.FAILED, S.EXITED), 60_000);
  cp.cp.send(NODE, { case: 'start', value: spec });
  return statusOf(await settled);
}

const shardLog = (id: string) => readFileSync(join(dirs.logDir, 'shards', `${id}.log`), 'utf8');
const auth = { authorization: `Bearer ${AGENT_KEY}` };

describe('a data-parallel vLLM shard (review §3 N2)', () => {
  it('lets a streamed completion on a DP=2 shard finish through a StopShard, then reports STOPPED', async () => {
    const port = await freePort();
    const spec = doubleStart('vllm', 'v-dp2', port, { gpus: [0, 1], args: ['--data-parallel-size', '2', '--sim-token-latency', '40ms'] });
    if (spec.profile) spec.profile.tensorParallelSize = 1;
    const ready = await startAndWait(spec);
    expect(ready.state, ready.error).toBe(S.READY);
    // The double runs as vLLM would with this argv: one API server, not one per DP rank.
    expect(shardLog('v-dp2')).not.toMatch(/API server processes/);
    const res = await streamChat(port, 30, auth);
    let first: () => void = () => {};
    const firstToken = new Promise<void>((r) => {
      first = r;
    });
    const stream = consumeStream(res, (n) => n === 1 && first());
    await firstToken;
    const stopped = cp.cp.waitFor(NODE, shardIs('v-dp2', S.STOPPED), 60_000);
    cp.cp.send(NODE, { case: 'stop', value: create(StopShardSchema, { shardId: 'v-dp2' }) });
    expect(await stream).toEqual({ tokens: 30, done: true });
    await stopped;
    expect(groupMembers(ready.pid)).toEqual([]);
  });
});

describe("a VLLM_API_KEY in the agent's own environment (review §3 N13)", () => {
  it('reaches the direct-launched engine, and readiness sends it: the shard becomes READY', async () => {
    const port = await freePort();
    const ready = await startAndWait(doubleStart('vllm', 'v-inherit', port, { gpus: [5] }));
    expect(ready.state, ready.error).toBe(S.READY);
    // The engine is keyed by what it inherited: without the key its /v1 says 401.
    expect((await fetch(`http://127.0.0.1:${port}/v1/models`)).status).toBe(401);
    expect((await fetch(`http://127.0.0.1:${port}/v1/models`, { headers: auth })).status).toBe(200);
    expect(JSON.stringify(agent.logs())).not.toContain(AGENT_KEY);
    const stopped = cp.cp.waitFor(NODE, shardIs('v-inherit', S.STOPPED), 60_000);
    cp.cp.send(NODE, { case: 'stop', value: create(StopShardSchema, { shardId: 'v-inherit' }) });
    await stopped;
  });
});
