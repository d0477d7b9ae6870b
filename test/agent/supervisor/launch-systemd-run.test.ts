import { copyFileSync, existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ShardState } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { isRunning, shardSpec } from '../../helpers/engine-processes.js';
import { useSupervisors } from '../../helpers/use-supervisors.js';
import { parseShardId } from '../../../src/lib/shard-id.js';

const harness = useSupervisors();
const FIXTURES = fileURLToPath(new URL('./fixtures/', import.meta.url));
const AGENT_SECRET = 'agent-env-aws-secret';
const PROFILE_SECRET = 'hf_SECRET_from_profile';

let saved: NodeJS.ProcessEnv;
let record: string;
beforeEach(() => {
  saved = { ...process.env };
  const bin = join(harness.dirs.root, 'bin');
  record = join(harness.dirs.root, 'record');
  mkdirSync(bin, { recursive: true });
  mkdirSync(record, { recursive: true });
  copyFileSync(join(FIXTURES, 'fake-systemd-run'), join(bin, 'systemd-run'));
  copyFileSync(join(FIXTURES, 'fake-systemctl'), join(bin, 'systemctl'));
  // Stand-ins first on PATH, as the real ones would be; the agent's own secret in its environment.
  process.env.PATH = `${bin}:${process.env.PATH}`;
  process.env.FAKE_SYSTEMD_DIR = record;
  process.env.AWS_SECRET_ACCESS_KEY = AGENT_SECRET;
});
afterEach(() => {
  for (const key of Object.keys(process.env)) if (!(key in saved)) delete process.env[key];
  Object.assign(process.env, saved);
});

const plan = () => ({ argv: ['sleep', '1000'], env: { HF_TOKEN: PROFILE_SECRET, CUDA_VISIBLE_DEVICES: '0' } });
const recorded = (name: string) => readFileSync(join(record, name), 'utf8');

describe('the systemd-run launcher (stand-in systemd-run and systemctl on PATH, recording argv)', () => {
  it('passes the environment through a 0600 file holding only the plan and PATH-like variables, never argv (security review, finding 7)', async () => {
    const sup = harness.newSupervisor({ launcher: 'systemd-run' });
    const { shard } = await sup.start(shardSpec('x.service'), { plan: plan(), servesHttp: false });
    expect(shard.state).toBe(ShardState.STARTING);
    expect(isRunning(shard.pid)).toBe(true);

    const argv = recorded('systemd-run.argv');
    expect(argv).not.toContain(PROFILE_SECRET);
    expect(argv).not.toContain(AGENT_SECRET);
    expect(argv).not.toContain('--setenv');
    // Explicitly suffixed: the unit systemctl is asked about is the one systemd-run made (finding 15).
    expect(argv.split('\n').slice(0, 3)).toEqual(['--unit', 'llmgw-shard-x.service.service', '--slice']);
    const calls = recorded('systemctl.calls');
    expect(calls.trim().split('\n').every((line) => line.endsWith(' -- llmgw-shard-x.service.service'))).toBe(true);
    expect(calls).not.toContain(PROFILE_SECRET);

    const envFile = join(harness.dirs.stateDir, 'shards', 'x.service.env');
    expect(argv).toContain(`--property=EnvironmentFile=${envFile}`);
    expect(recorded('env-mode').trim()).toBe('600');
    const env = recorded('env-copy');
    expect(env).toContain(`HF_TOKEN="${PROFILE_SECRET}"\n`);
    expect(env).toContain('CUDA_VISIBLE_DEVICES="0"\n');
    expect(env).toMatch(/^PATH="/m);
    expect(env).not.toContain(AGENT_SECRET);
    expect(env).not.toContain('FAKE_SYSTEMD_DIR');

    await sup.stop(parseShardId('x.service'), { graceMs: 500 });
    sup.remove(parseShardId('x.service'));
    expect(existsSync(envFile)).toBe(false);
  });

  it('stops the unit when a step after systemd-run fails, and says so without the command line (finding 15)', async () => {
    process.env.FAKE_MAINPID = '0';
    const sup = harness.newSupervisor({ launcher: 'systemd-run' });
    const err = await sup.start(shardSpec('s1'), { plan: plan(), servesHttp: false }).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).toBe(
      'systemd unit llmgw-shard-s1.service has no main process (MainPID 0); see journalctl -u llmgw-shard-s1.service; the unit was stopped',
    );
    expect(recorded('systemctl.calls')).toContain('stop -- llmgw-shard-s1.service\n');
    expect(existsSync(join(record, 'llmgw-shard-s1.service.pid'))).toBe(false);
    expect(existsSync(join(harness.dirs.stateDir, 'shards', 's1.env'))).toBe(false);
    expect(existsSync(join(harness.dirs.stateDir, 'shards', 's1.json'))).toBe(false);
  });

  it('reports a failed systemd-run by its exit code and last error line, no argv, no secret, and stops nothing', async () => {
    process.env.FAKE_SYSTEMD_RUN_FAIL = 'llmgw-shard-s2.service';
    const sup = harness.newSupervisor({ launcher: 'systemd-run' });
    const err = await sup.start(shardSpec('s2'), { plan: plan(), servesHttp: false }).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).toBe(
      'cannot launch engine through systemd-run (unit llmgw-shard-s2.service): systemd-run exited with code 1: Failed to start transient service unit: Unit llmgw-shard-s2.service already exists.; see journalctl -u llmgw-shard-s2.service',
    );
    expect(err?.message).not.toContain(PROFILE_SECRET);
    // The unit of that name may be a healthy engine: it is not stopped (only looked at, before the launch).
    expect(recorded('systemctl.calls')).not.toMatch(/^(stop|kill)/m);
  });
});
