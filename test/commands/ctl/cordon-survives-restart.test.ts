import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { type AgentMessage, type Inventory, type Register, ShardState } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { agentDirs, cleanUpEnginesAfterTest, startAgentProcess } from '../../helpers/agent-process.js';
import { freePort, isRunning } from '../../helpers/engine-processes.js';
import { freeFakeGpu } from '../../helpers/fake-gpus.js';
import { runCli } from '../../helpers/run-cli.js';
import { isRegister, shardIs, simStart } from '../../helpers/sim-shards.js';
import { startControlPlane } from '../../helpers/start-control-plane.js';

/*
 * Issue 28's acceptance, "cordon across a restart": a cordoned node refuses
 * new starts with the operator's reason, keeps its running shard, tells the
 * control plane (Register.cordoned, the Cordoned condition), still refuses
 * after the agent is killed and restarted, and starts again once uncordoned.
 */

const errorOf = (m: AgentMessage) => (m.msg.value as { error: string }).error;
const pidOf = (m: AgentMessage) => (m.msg.value as { pid: number }).pid;
const cordonedCondition = (inv: Inventory | undefined) => inv?.conditions.find((c) => c.type === 'Cordoned');
const isInventoryCordoned = (active: boolean) => (m: AgentMessage) => m.msg.case === 'inventory' && cordonedCondition(m.msg.value)?.active === active;
const REFUSAL = /^node is cordoned since \d{4}-\d\d-\d\dT[\d:.]+Z by uid \d+ \(PSU swap, OPS-1234\); run llmgw ctl uncordon$/;

describe('ctl cordon across an agent restart', () => {
  it('refuses starts with the reason, keeps the running shard, says so in Register after kill -9, and uncordon lets starts through', async () => {
    const { cp, url } = await startControlPlane();
    const dirs = agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-cordon-')));
    onTestFinished(() => rmSync(dirs.root, { recursive: true, force: true }));
    cleanUpEnginesAfterTest(dirs);
    const first = startAgentProcess({ server: url, dirs });
    const reg1 = (await cp.waitFor('node-a', isRegister, 20_000)).msg.value as Register;
    expect(reg1.cordoned).toBe(false);
    expect(cordonedCondition(reg1.inventory)?.active).toBe(false);

    const ready = cp.waitFor('node-a', shardIs('s1', ShardState.READY), 30_000);
    cp.send('node-a', { case: 'start', value: simStart('s1', await freePort(), { gpu: freeFakeGpu(0) }) });
    const pid = pidOf(await ready);

    const told = cp.waitFor('node-a', isInventoryCordoned(true), 10_000);
    const cordon = await runCli(['ctl', 'cordon', '--reason', 'PSU swap, OPS-1234', '--socket', dirs.socket]);
    expect(cordon.exitCode, cordon.stderr).toBe(0);
    expect(cordon.stdout).toMatch(/^node cordoned since .* \(PSU swap, OPS-1234\): new shards are refused/);
    expect(cordonedCondition((await told).msg.value as Inventory)?.reason).toBe('PSU swap, OPS-1234');
    // On disk before ctl returned: a kill -9 right after it must not lose it.
    expect(JSON.parse(readFileSync(join(dirs.stateDir, 'cordon.json'), 'utf8'))).toMatchObject({ version: 1, reason: 'PSU swap, OPS-1234' });

    const refused = cp.waitFor('node-a', shardIs('s2', ShardState.FAILED), 10_000);
    cp.send('node-a', { case: 'start', value: simStart('s2', await freePort(), { gpu: freeFakeGpu(1) }) });
    expect(errorOf(await refused)).toMatch(REFUSAL);
    expect(isRunning(pid)).toBe(true);

    const status = await runCli(['ctl', 'status', '--socket', dirs.socket]);
    expect(status.exitCode, status.stderr).toBe(0);
    expect(status.stdout).toMatch(/^conditions Cordoned for .* \(PSU swap, OPS-1234\): new shards are refused$/m);

    first.kill('SIGKILL');
    await first.exited;
    const reRegistered = cp.waitFor('node-a', isRegister, 20_000);
    const second = startAgentProcess({ server: url, dirs });
    const reg2 = (await reRegistered).msg.value as Register;
    expect(reg2.cordoned).toBe(true);
    expect(cordonedCondition(reg2.inventory)).toMatchObject({ active: true, reason: 'PSU swap, OPS-1234' });
    expect(reg2.runningShards.map((s) => [s.shardId, s.pid])).toEqual([['s1', pid]]);
    expect(second.logs().some((r) => r.msg === 'node is cordoned' && r.reason === 'PSU swap, OPS-1234')).toBe(true);

    const refusedAgain = cp.waitFor('node-a', shardIs('s3', ShardState.FAILED), 10_000);
    cp.send('node-a', { case: 'start', value: simStart('s3', await freePort(), { gpu: freeFakeGpu(2) }) });
    expect(errorOf(await refusedAgain)).toMatch(REFUSAL);

    const cleared = cp.waitFor('node-a', isInventoryCordoned(false), 10_000);
    const uncordon = await runCli(['ctl', 'uncordon', '--json', '--socket', dirs.socket]);
    expect(uncordon.exitCode, uncordon.stderr).toBe(0);
    expect(JSON.parse(uncordon.stdout)).toMatchObject({ changed: true, byUid: -1 });
    await cleared;
    const started = cp.waitFor('node-a', shardIs('s4', ShardState.READY, ShardState.FAILED), 30_000);
    cp.send('node-a', { case: 'start', value: simStart('s4', await freePort(), { gpu: freeFakeGpu(3) }) });
    const s4 = await started;
    expect(ShardState[(s4.msg.value as { state: ShardState }).state], errorOf(s4)).toBe('READY');
  }, 90_000);

  it('keeps a node whose cordon file is corrupt cordoned, saying so, until ctl uncordon', async () => {
    const { cp, url } = await startControlPlane();
    const dirs = agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-cordon-bad-')));
    onTestFinished(() => rmSync(dirs.root, { recursive: true, force: true }));
    cleanUpEnginesAfterTest(dirs);
    mkdirSync(dirs.stateDir, { recursive: true, mode: 0o700 });
    writeFileSync(join(dirs.stateDir, 'cordon.json'), '{"version": 1, "reason": ');
    const agent = startAgentProcess({ server: url, dirs });
    const reg = (await cp.waitFor('node-a', isRegister, 20_000)).msg.value as Register;
    expect(reg.cordoned).toBe(true);
    expect(cordonedCondition(reg.inventory)?.reason).toMatch(/cordon file .*cordon\.json is corrupt \(it is not JSON\), so the node is kept cordoned/);
    expect(agent.logs().some((r) => r.msg === 'cordon file corrupt; node kept cordoned until ctl uncordon')).toBe(true);
    const uncordon = await runCli(['ctl', 'uncordon', '--socket', dirs.socket]);
    expect(uncordon.exitCode, uncordon.stderr).toBe(0);
    expect(uncordon.stdout).toBe('node uncordoned: new shards may start');
  });

  it('refuses a reason of more than one line before calling the agent (exit 2)', async () => {
    const r = await runCli(['ctl', 'cordon', '--reason', 'a\nb', '--socket', '/nonexistent/agent.sock']);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toMatch(/--reason must be one line/);
  });
});
