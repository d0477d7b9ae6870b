import { create, toJsonString } from '@bufbuild/protobuf';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentMessageSchema, ShardState, type StartShard, StartShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { freePort } from '../faults/scenarios/fault-harness.js';
import { agentDirs } from '../helpers/agent-process.js';
import { freeFakeGpu } from '../helpers/fake-gpus.js';
import { shardIs } from '../helpers/sim-shards.js';
import { expectAgentUnharmed } from './agent-unharmed.js';
import { bootAgentAgainst, type HostileControlPlane, startHostileControlPlane } from './hostile-control-plane.js';

/*
 * Finding 7 of the security review, against the real agent and as the
 * review reproduced it, with a stand-in systemd-run (this container has no
 * systemd; test/systemd/engine-user-unit.test.ts runs the same launcher under
 * a real one): `launcher: systemd-run` put the whole engine environment, the
 * agent's own secrets and the profile's, on systemd-run's command line, which
 * every user sees in ps and which lands in the unit's Environment= and, when
 * the launch failed, in the journal and the FAILED reason.
 */

const FIXTURES = fileURLToPath(new URL('../agent/supervisor/fixtures/', import.meta.url));
const AGENT_SECRET = 'agent-env-aws-secret';
const PROFILE_SECRET = 'hf_SECRET_from_profile';
const root = mkdtempSync(join(tmpdir(), 'llmgw-sec-sdrun-'));
const dirs = agentDirs(root);
const bin = join(root, 'bin');
const record = join(root, 'record');
let cp: HostileControlPlane;

beforeAll(async () => {
  mkdirSync(bin, { recursive: true });
  mkdirSync(record, { recursive: true });
  copyFileSync(join(FIXTURES, 'fake-systemd-run'), join(bin, 'systemd-run'));
  copyFileSync(join(FIXTURES, 'fake-systemctl'), join(bin, 'systemctl'));
  cp = await startHostileControlPlane();
});
afterAll(async () => {
  await cp?.close();
  rmSync(root, { recursive: true, force: true });
});

function start(shardId: string, gpu: number, port: number): StartShard {
  return create(StartShardSchema, {
    shardId,
    replicaId: `r-${shardId}`,
    nnodes: 1,
    gpuIndices: [gpu],
    httpPort: port,
    profile: { name: 'p', engine: 'sim', model: 'sim/m', servedModelName: 'm', tensorParallelSize: 1, env: { HF_TOKEN: PROFILE_SECRET }, args: ['--load-time', '100ms'] },
  });
}

const recorded = (name: string) => readFileSync(join(record, name), 'utf8');

describe('the systemd-run launcher keeps secrets off command lines and out of reports (security review, finding 7)', () => {
  it('hands the environment over in a 0600 file, and a failed launch reports no command line and no value', { timeout: 120_000 }, async () => {
    const agent = await bootAgentAgainst(cp, {
      dirs,
      nodeId: 'sdrun-node',
      env: { PATH: `${bin}:${process.env.PATH}`, FAKE_SYSTEMD_DIR: record, AWS_SECRET_ACCESS_KEY: AGENT_SECRET, LLMGW_SUPERVISOR_LAUNCHER: 'systemd-run' },
    });

    const id = 'sdrun-g1-r0';
    cp.send({ case: 'start', value: start(id, freeFakeGpu(0), await freePort()) });
    await cp.waitFor(shardIs(id, ShardState.READY), 60_000);
    // What ps showed every user: systemd-run's argv.
    const argv = recorded('systemd-run.argv');
    expect(argv).toContain(`llmgw-shard-${id}.service`);
    expect(argv).not.toContain(PROFILE_SECRET);
    expect(argv).not.toContain(AGENT_SECRET);
    expect(argv).not.toContain('--setenv');
    const envFile = join(dirs.stateDir, 'shards', `${id}.env`);
    expect(argv).toContain(`--property=EnvironmentFile=${envFile}`);
    // The file the unit reads: root's alone, with the profile's secret and not the agent's.
    expect(recorded('env-mode').trim()).toBe('600');
    expect(recorded('env-copy')).toContain(`HF_TOKEN="${PROFILE_SECRET}"\n`);
    expect(recorded('env-copy')).not.toContain(AGENT_SECRET);

    // systemd-run refuses the next one: the FAILED reason carries neither argv nor values.
    writeFileSync(join(record, 'fail'), 'llmgw-shard-sdrun-g2-r0.service');
    const failedId = 'sdrun-g2-r0';
    cp.send({ case: 'start', value: start(failedId, freeFakeGpu(1), await freePort()) });
    const failed = await cp.waitFor(shardIs(failedId, ShardState.FAILED), 60_000);
    if (failed.msg.case !== 'shard') throw new Error('not a shard status');
    expect(failed.msg.value.error).toMatch(/systemd-run/);
    expect(failed.msg.value.error).toMatch(/already exists/);
    expect(existsSync(join(dirs.stateDir, 'shards', `${failedId}.env`))).toBe(false);

    // Nothing the agent said, to the control plane or in its log, holds a secret or the command line.
    const said = [...cp.received.map((m) => toJsonString(AgentMessageSchema, m)), ...agent.logs().map((r) => JSON.stringify(r))].join('\n');
    for (const secret of [PROFILE_SECRET, AGENT_SECRET, '--setenv', '--property=EnvironmentFile']) expect(said).not.toContain(secret);

    // A stop removes the environment file with the unit.
    cp.send({ case: 'stop', value: { shardId: id, grace: { seconds: 1n } } });
    await cp.waitFor(shardIs(id, ShardState.STOPPED), 30_000);
    expect(existsSync(envFile)).toBe(false);

    expectAgentUnharmed(agent.pid);
  });
});
