import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import { agentDirs, cleanUpEnginesAfterTest, startAgentProcess } from '../helpers/agent-process.js';
import { freePort } from '../helpers/engine-processes.js';
import { runCli } from '../helpers/run-cli.js';
import { simStart } from '../helpers/sim-shards.js';
import { killSquatters, NOBODY, startSquatter } from '../helpers/squatter.js';
import { expectAgentUnharmed } from './agent-unharmed.js';
import { type HostileControlPlane, startHostileControlPlane } from './hostile-control-plane.js';

/*
 * Review 2, N7: a local user binds a loading engine's port first. The agent
 * no longer reports READY (finding 2), but the engine's own bind then fails,
 * it exits 1, and the shard went FAILED with "engine exited with code 1
 * while starting": the squatter the agent had seen was dropped from the
 * reason, and an operator had to dig it out of the engine's log.
 */

const root = mkdtempSync(join(tmpdir(), 'llmgw-sec-squat-failed-'));
let cp: HostileControlPlane;

beforeAll(async () => {
  cp = await startHostileControlPlane();
});
afterEach(killSquatters);
afterAll(async () => {
  await cp?.close();
  rmSync(root, { recursive: true, force: true });
});

/** As nobody: a listener on 127.0.0.1:`port` that stays; resolves once it listens. */
async function squat(port: number) {
  const s = startSquatter(`require('net').createServer((s)=>s.destroy()).listen(${port},'127.0.0.1',()=>console.log('up'))`);
  await s.up;
  return s.child;
}

describe.skipIf(process.geteuid?.() !== 0)('a local user squatting a loading shard\'s port until the engine gives up (review 2, N7)', () => {
  it('reports FAILED naming the squatter\'s pid and uid, to the control plane and in ctl status, and the agent is unharmed', { timeout: 30_000 }, async () => {
    const dirs = agentDirs(join(root, 'agent'));
    cleanUpEnginesAfterTest(dirs);
    const agent = startAgentProcess({ server: cp.url, dirs, nodeId: 'squat-failed-node' });
    await cp.waitFor((m) => m.msg.case === 'register');
    const port = await freePort();

    // The sim opens its port after 3 s, as vLLM listens once its weights are
    // loaded; the squatter binds it before, and stays.
    cp.send({ case: 'start', value: simStart('squat-failed', port, { args: ['--load-time', '3s'] }) });
    await cp.waitFor((m) => m.msg.case === 'shard' && m.msg.value.shardId === 'squat-failed' && m.msg.value.state === ShardState.STARTING);
    const squatter = await squat(port);

    const failed = await cp.waitFor((m) => m.msg.case === 'shard' && m.msg.value.shardId === 'squat-failed' && m.msg.value.state === ShardState.FAILED, 15_000);
    const why = `engine exited with code 1 while starting: port ${port} held by another process (pid ${squatter.pid}, uid ${NOBODY})`;
    expect(failed.msg.case === 'shard' && failed.msg.value.error).toBe(why);

    const r = await runCli(['ctl', 'status', '--all', '--socket', dirs.socket, '--json']);
    const status = JSON.parse(r.stdout) as { shards: { shardId: string; state: string; error: string }[] };
    expect(status.shards.find((s) => s.shardId === 'squat-failed')).toMatchObject({ state: 'SHARD_STATE_FAILED', error: why });
    // And the table an operator reads says it too.
    const table = await runCli(['ctl', 'status', '--all', '--socket', dirs.socket]);
    expect(table.stdout).toContain(`pid ${squatter.pid}, uid ${NOBODY}`);

    expectAgentUnharmed(agent.pid);
    await agent.stop();
  });
});
