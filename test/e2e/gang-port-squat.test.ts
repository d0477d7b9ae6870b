import { afterEach, describe, expect, it } from 'vitest';
import { ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import { freePort, until } from '../helpers/engine-processes.js';
import { gangDeployment } from '../helpers/gang-deployment.js';
import { type GangCluster, isState, RANK_SHARD, shardHistory, shardOf, startGangCluster } from '../helpers/gang-cluster.js';
import { runCli } from '../helpers/run-cli.js';
import { killSquatters, NOBODY, startSquatter } from '../helpers/squatter.js';

/*
 * Issue 48's acceptance for item 3 (security review 4, F1 and F5): under
 * 1,000 idle connections to a node's gang port from another uid, and a
 * squat of that port while its agent restarts, the gang stays READY and the
 * agents say what they saw. Two real agents (plaintext gang endpoints on
 * loopback, fixed ports so a restarted agent binds the same one), the
 * reference control plane, sim ranks; the attacker is uid 65534 (setpriv).
 * On loopback every connection comes from 127.0.0.1, the peer's own
 * address: the flood fills the per-source cap, so the peer's asks are
 * reset ("unknown"), never read as the node gone.
 */

afterEach(killSquatters);

/**
 * The agents' gang_agent_grace: 5 s, not the 10 s default, still more than
 * twice the refusals an agent restart makes here (its port closed until the
 * squatter binds it, or until the agent takes it back, within 2 s).
 */
const AGENT_GRACE_MS = 5_000;
/** Past the agent grace and three watch rounds: what would have broken the gang before had time to. */
const HOLD_MS = AGENT_GRACE_MS + 3_000;

/** Every gang_break either node sent, and every report that is not READY after the rank's first READY, and any later placement. */
function breaks(c: GangCluster): string[] {
  const out: string[] = [];
  for (const node of ['node-a', 'node-b'] as const) {
    let ready = false;
    for (const m of c.cp.cp.messages(node)) {
      const s = shardOf(m);
      if (!s?.shardId.startsWith('gang-')) continue;
      if (s.gangBreak) out.push(`${node} ${s.shardId}: gang_break ${s.gangBreak.reason}`);
      if (s.shardId !== RANK_SHARD[node]) out.push(`${node} ${s.shardId}: a later placement`);
      else if (s.state === ShardState.READY) ready = true;
      // An agent restart reports its adopted rank STARTING, then READY again (adoption settles it like a start).
      else if (ready && s.state !== ShardState.STARTING) out.push(`${node} ${s.shardId}: ${ShardState[s.state]} ${s.error}`);
    }
  }
  return out;
}

const msgs = (recs: Record<string, unknown>[]) => recs.map((r) => String(r.msg));

describe('a gang under a stranger on its port (issue 48 item 3 acceptance)', () => {
  it('1,000 idle connections from another uid, then a squat of the port while the agent restarts: the gang stays READY, and the agents say what they saw', { timeout: 180_000 }, async () => {
    const gangPorts = { 'node-a': await freePort(), 'node-b': await freePort() };
    const c = await startGangCluster({ deployment: gangDeployment(), gangAddr: true, gangPorts, agentGrace: `${AGENT_GRACE_MS / 1000}s` });
    const portB = gangPorts['node-b'];

    // 1. uid 65534 holds 1,000 connections to node-b's gang endpoint, sending nothing, opening again each one closed.
    const flood = startSquatter(
      `const net = require('net'); let open = 0; let closed = 0; const errs = {};
       const one = () => { const s = net.connect({ host: '127.0.0.1', port: ${portB} }); s.on('error', (e) => { errs[e.code] = (errs[e.code] || 0) + 1; }); s.on('connect', () => open++); s.on('close', () => { closed++; setTimeout(one, 1000); }); };
       for (let i = 0; i < 1000; i++) one();
       console.log('up'); setInterval(() => console.log('closed ' + closed + ' opened ' + open + ' errors ' + JSON.stringify(errs)), 1000);`,
    );
    await flood.up;
    await until(() => flood.lines.some((l) => Number(l.split(' ')[3]) >= 1_000), 'the flood to have opened 1,000 connections');
    // node-b says it closed connections past the per-source cap.
    const capLine = (r: Record<string, unknown>) => String(r.msg).startsWith('gang endpoint closed connections past the per-source cap') && r.source === '127.0.0.1';
    await until(() => c.agents['node-b'].logs().some(capLine), `node-b to say it closed connections past the cap (flood: ${flood.lines.at(-1)})`);
    await new Promise((r) => setTimeout(r, HOLD_MS));
    expect(breaks(c)).toEqual([]);
    // node-a says its asks told it nothing.
    expect(msgs(c.agents['node-a'].logs())).toContainEqual(expect.stringMatching(/^gang peer rank 1 on node-b: not judged \(agent 127\.0\.0\.1:\d+: .*\): no evidence either way$/));
    flood.child.kill('SIGKILL');
    await new Promise((r) => flood.child.once('exit', r));

    // 2. node-b's agent restarts (an upgrade); uid 65534 takes its gang port in between and answers rank 1 FAILED.
    c.agents['node-b'].kill('SIGTERM');
    expect((await c.agents['node-b'].exited).exitCode).toBe(0);
    const forged = JSON.stringify({ node: 'node-b', ranks: [{ rank: 1, shard: RANK_SHARD['node-b'], state: 'FAILED', running: false, stalled: false, error: 'forged by uid 65534' }] });
    const squat = startSquatter(`require('http').createServer((q, s) => s.end(${JSON.stringify(forged)})).listen(${portB}, '127.0.0.1', () => console.log('up'))`);
    await squat.up;
    const readyAgain = c.cp.cp.waitFor('node-b', isState(RANK_SHARD['node-b'], ShardState.READY), 60_000);
    const restarted = c.startAgent('node-b');
    await readyAgain;
    await until(() => msgs(restarted.logs()).some((m) => m.includes(`is held by uid ${NOBODY}`)), "the restarted agent to name the port's holder");
    await new Promise((r) => setTimeout(r, HOLD_MS));
    expect(breaks(c)).toEqual([]);
    // The restarted agent runs (it used to exit 1 and be restarted for ever) and said who holds its port, once.
    expect(await Promise.race([restarted.exited.then(() => 'exited'), Promise.resolve('running')])).toBe('running');
    expect(msgs(restarted.logs()).filter((m) => m.startsWith(`gang_addr 127.0.0.1:${portB} is held by uid ${NOBODY}`))).toHaveLength(1);
    // node-a read the squatter's answer as no evidence, naming its uid.
    expect(msgs(c.agents['node-a'].logs())).toContainEqual(expect.stringContaining(`port ${portB} is held by uid ${NOBODY}, not this agent's user`));

    // And in its events, for `ctl events` (a node event with the holder's uid).
    const events = await runCli(['ctl', 'events', '--json', '--socket', c.dirs['node-b'].socket]);
    expect(events.stdout).toContain(`is held by uid ${NOBODY}`);
    expect(events.stdout).toContain('GangPortHeld');

    // 3. The squatter gone, node-b's agent takes its port and answers for its rank again.
    squat.child.kill('SIGKILL');
    await until(() => msgs(restarted.logs()).some((m) => m.startsWith(`gang endpoint listening on 127.0.0.1:${portB} after the port was held`)), 'the restarted agent to take its port');
    const res = await fetch(`http://127.0.0.1:${portB}/v1/gangs/gang-0-g1`);
    expect(breaks(c)).toEqual([]);
    expect(await res.json(), shardHistory(c, 'node-b')).toMatchObject({ node: 'node-b', ranks: [{ rank: 1, state: 'READY' }] });
    expect(breaks(c)).toEqual([]);
  });
});
