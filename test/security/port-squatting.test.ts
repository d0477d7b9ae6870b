import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type AgentMessage, ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import { agentDirs, cleanUpEnginesAfterTest, startAgentProcess } from '../helpers/agent-process.js';
import { freePort, until } from '../helpers/engine-processes.js';
import { runCli } from '../helpers/run-cli.js';
import { simStart } from '../helpers/sim-shards.js';
import { killSquatters, NOBODY, startSquatter as startNobody } from '../helpers/squatter.js';
import { type HostileControlPlane, startHostileControlPlane } from './hostile-control-plane.js';
import { expectAgentUnharmed } from './agent-unharmed.js';

/*
 * Finding 2 of the security review, the READY half: a local unprivileged
 * user binds a loading engine's port before the engine does and answers
 * like the engine. The agent reported that shard READY, and the control
 * plane sent its traffic to the squatter.
 */

const root = mkdtempSync(join(tmpdir(), 'llmgw-sec-squat-'));
let cp: HostileControlPlane;

beforeAll(async () => {
  cp = await startHostileControlPlane();
});
afterEach(killSquatters);
afterAll(async () => {
  await cp?.close();
  rmSync(root, { recursive: true, force: true });
});

/**
 * As nobody, from `/` and inline (nobody may not read a checkout under
 * /root): an HTTP server on 127.0.0.1:`port` answering /health 200 and
 * /v1/models listing `model`, as the engine would. It prints "up" once
 * listening and a line per request it was sent.
 */
function startSquatter(port: number, model: string) {
  const code = `require('http').createServer((q,s)=>{console.log('request '+q.url);if(q.url==='/v1/models'){s.writeHead(200,{'content-type':'application/json'});s.end(JSON.stringify({object:'list',data:[{id:${JSON.stringify(model)},object:'model'}]}))}else{s.writeHead(200);s.end()}}).listen(${port},'127.0.0.1',()=>console.log('up'))`;
  const s = startNobody(code);
  return { child: s.child, requests: s.lines, up: s.up };
}

const stateNames = (shardId: string) =>
  cp.received.flatMap((m) => (m.msg.case === 'shard' && m.msg.value.shardId === shardId ? [ShardState[m.msg.value.state]] : []));

describe.skipIf(process.geteuid?.() !== 0)('a local user squatting a loading shard\'s port (security review, finding 2)', () => {
  it('keeps the shard from READY while the port is held, saying by whom, and never talks to the squatter; READY once the engine binds it', { timeout: 120_000 }, async () => {
    const dirs = agentDirs(join(root, 'agent'));
    cleanUpEnginesAfterTest(dirs);
    const agent = startAgentProcess({ server: cp.url, dirs, nodeId: 'squat-node' });
    await cp.waitFor((m) => m.msg.case === 'register');
    const port = await freePort();

    // The sim opens its port once its load ends, as vLLM does once its
    // weights are loaded; the squatter binds it before and leaves before
    // then (a taken port makes the sim exit, as uvicorn does). The load
    // ends when the test writes `loadedFile`, after the squatter is gone (a
    // fixed 15 s load did, which the steps below needed only part of).
    const loadedFile = join(root, 'squatted-loaded');
    cp.send({ case: 'start', value: simStart('squatted', port, { args: ['--load-until-file', loadedFile] }) });
    await cp.waitFor((m) => m.msg.case === 'shard' && m.msg.value.shardId === 'squatted' && m.msg.value.state === ShardState.STARTING);
    const squatter = startSquatter(port, 'm');
    await squatter.up;

    const why = `port ${port} held by another process (pid ${squatter.child.pid}, uid ${NOBODY})`;
    const shardInfo = async () => {
      const r = await runCli(['ctl', 'status', '--socket', dirs.socket, '--json']);
      const status = JSON.parse(r.stdout) as { shards: { shardId: string; state: string; error: string }[] };
      return status.shards.find((s) => s.shardId === 'squatted');
    };
    let seen: { state: string; error: string } | undefined;
    await until(async () => {
      seen = await shardInfo();
      return seen?.error === why;
    }, `ctl status to say "${why}"`);
    expect(seen?.state).toBe('SHARD_STATE_STARTING');
    // The control plane is told too, on the stream: still STARTING, and why it is not READY.
    const told = await cp.waitFor((m) => m.msg.case === 'shard' && m.msg.value.shardId === 'squatted' && m.msg.value.error !== '', 30_000);
    expect(told.msg.case === 'shard' && [ShardState[told.msg.value.state], told.msg.value.error]).toEqual(['STARTING', why]);
    // A few more readiness ticks against the squatter: still not READY, and it was asked nothing.
    await new Promise((r) => setTimeout(r, 2000));
    expect(stateNames('squatted')).not.toContain('READY');
    expect(squatter.requests).toEqual([]);

    squatter.child.kill('SIGKILL');
    // Once the squatter is gone, the stream hears the reason cleared (STARTING, no error), then READY.
    const after = (m: AgentMessage) => cp.received.indexOf(m) > cp.received.indexOf(told);
    await cp.waitFor((m) => m.msg.case === 'shard' && m.msg.value.shardId === 'squatted' && m.msg.value.state === ShardState.STARTING && m.msg.value.error === '' && after(m), 60_000);
    // Only now does the engine bind its port: READY comes from it, with the port free.
    writeFileSync(loadedFile, '');
    const ready = await cp.waitFor((m) => m.msg.case === 'shard' && m.msg.value.shardId === 'squatted' && m.msg.value.state !== ShardState.STARTING, 60_000);
    expect(ready.msg.case === 'shard' && [ShardState[ready.msg.value.state], ready.msg.value.error]).toEqual(['READY', '']);
    expect((await shardInfo())?.error).toBe('');
    expect(squatter.requests).toEqual([]);
    expectAgentUnharmed(agent.pid);
    await agent.stop();
  });
});
