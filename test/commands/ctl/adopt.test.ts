import { spawn } from 'node:child_process';
import { closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import type { AdoptResponseJson } from '../../../src/gen/llmgw/v1/admin_pb.js';
import { ShardState, type ShardStatus } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { agentDirs, cleanUpEnginesAfterTest, startAgentProcess } from '../../helpers/agent-process.js';
import { type CtlFixture, NODE_ID, startCtlFixture } from '../../helpers/ctl-fixture.js';
import { freePort, isRunning, until } from '../../helpers/engine-processes.js';
import { runCli } from '../../helpers/run-cli.js';
import { isRegister, shardIs, simStart } from '../../helpers/sim-shards.js';

let fx: CtlFixture;
let s1: { pid: number };

beforeAll(async () => {
  fx = await startCtlFixture();
  s1 = await fx.startShard('s1');
}, 60_000);
afterAll(() => fx?.close());

const stateDir = () => join(fx.dirs.stateDir, 'shards');

/** A state file whose engine is gone: a pid that exited, with an identity that cannot match. */
async function leaveDeadStateFile(id: string): Promise<number> {
  const template = JSON.parse(readFileSync(join(stateDir(), 's1.json'), 'utf8'));
  const child = spawn('true');
  await new Promise((resolve) => child.once('exit', resolve));
  const pid = child.pid as number;
  writeFileSync(join(stateDir(), `${id}.json`), JSON.stringify({ ...template, shardId: id, pid, pgid: pid, spec: { ...template.spec, shardId: id } }));
  return pid;
}

/** An engine nothing can describe: it writes the shard's log, but its state file is unreadable. */
function leaveUnidentifiableEngine(id: string): number {
  writeFileSync(join(stateDir(), `${id}.json`), '{ not json');
  mkdirSync(join(fx.dirs.logDir, 'shards'), { recursive: true });
  const log = openSync(join(fx.dirs.logDir, 'shards', `${id}.log`), 'a');
  const child = spawn('sleep', ['1000'], { detached: true, stdio: ['ignore', log, log] });
  closeSync(log);
  child.unref();
  return child.pid as number;
}

/** An engine another agent started and left (killed with -9): its state file moved into this agent's state directory. */
async function leaveIdentifiedEngine(id: string): Promise<number> {
  const dirsB = agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-ctl-b-')));
  onTestFinished(() => rmSync(dirsB.root, { recursive: true, force: true }));
  cleanUpEnginesAfterTest(dirsB);
  const b = startAgentProcess({ server: fx.url, dirs: dirsB, nodeId: 'node-b' });
  await fx.cp.waitFor('node-b', isRegister, 20_000);
  const ready = fx.cp.waitFor('node-b', shardIs(id, ShardState.READY), 30_000);
  fx.cp.send('node-b', { case: 'start', value: simStart(id, await freePort(), { gpu: 7 }) });
  const pid = ((await ready).msg.value as ShardStatus).pid;
  b.kill('SIGKILL');
  await b.exited;
  renameSync(join(dirsB.stateDir, 'shards', `${id}.json`), join(stateDir(), `${id}.json`));
  return pid;
}

describe('llmgw ctl adopt', () => {
  it('prints one line per engine: adopted, killed, cleaned, already supervised; the adopted one is reported to the control plane', async () => {
    const gonePid = await leaveDeadStateFile('gone');
    const strayPid = leaveUnidentifiableEngine('stray');
    const movedPid = await leaveIdentifiedEngine('moved');
    const reportedReady = fx.cp.waitFor(NODE_ID, shardIs('moved', ShardState.READY), 30_000);

    const r = await runCli(['ctl', 'adopt', '--socket', fx.socket]);
    expect(r.stderr).toBe('');
    expect(r.exitCode).toBe(0);
    const lines = r.stdout.split('\n');
    expect(lines).toHaveLength(4);
    expect(lines[0]).toMatch(new RegExp(`^gone pid ${gonePid}: cleaned \\(its process was gone; state removed\\): .+`));
    expect(lines[1]).toBe(`moved pid ${movedPid}: adopted (supervised again; settling to READY)`);
    expect(lines[2]).toBe(`s1 pid ${s1.pid}: already supervised`);
    expect(lines[3]).toMatch(/^stray pid \d+: killed \(alive but unidentifiable\): .+/);

    const ready = (await reportedReady).msg.value as ShardStatus;
    expect(ready).toMatchObject({ pid: movedPid, adopted: true });
    await until(() => !isRunning(strayPid), 'the unidentifiable engine to be gone');
  });

  it('--json prints the AdoptResponse as proto JSON', async () => {
    const gonePid = await leaveDeadStateFile('gone2');
    const r = await runCli(['ctl', 'adopt', '--json', '--socket', fx.socket]);
    expect(r.exitCode).toBe(0);
    const res = JSON.parse(r.stdout) as AdoptResponseJson;
    expect(res.results?.find((x) => x.shardId === 'gone2')).toEqual({
      shardId: 'gone2',
      outcome: 'ADOPT_OUTCOME_CLEANED',
      pid: gonePid,
      reason: expect.any(String),
    });
    expect(res.results?.find((x) => x.shardId === 's1')).toEqual({ shardId: 's1', outcome: 'ADOPT_OUTCOME_ALREADY_SUPERVISED', pid: s1.pid, reason: '' });
  });
});
