import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import { freePort } from '../faults/scenarios/fault-harness.js';
import { agentDirs } from '../helpers/agent-process.js';
import { freeFakeGpu } from '../helpers/fake-gpus.js';
import { shardIs, simStart } from '../helpers/sim-shards.js';
import { expectAgentUnharmed } from './agent-unharmed.js';
import { bootAgentAgainst, type HostileControlPlane, startHostileControlPlane } from './hostile-control-plane.js';

/*
 * Finding 8 of the security review, against the real agent: engine logs
 * were 0644 in a 0755 directory, so any local user read what engines print
 * (prompts, tokens, stack traces), and admin.group protected nothing. Here
 * every directory above the logs is open to all, so only the logs' own
 * modes keep `nobody` out; a member of admin.group (nobody with group
 * `users`) still reads them, as `ctl logs` does for operators.
 */

const ADMIN_GROUP = 'users';
const ADMIN_GID = Number(execFileSync('getent', ['group', ADMIN_GROUP], { encoding: 'utf8' }).split(':')[2]);
const root = mkdtempSync(join(tmpdir(), 'llmgw-sec-logs-'));
const dirs = agentDirs(root);
let cp: HostileControlPlane;

beforeAll(async () => {
  // mkdtemp makes 0700: opened up, nothing but the agent's own modes stands between nobody and the logs.
  chmodSync(root, 0o755);
  // log_dir itself is the operator's (systemd's LogsDirectory= makes it 0750 root:root): this one lets
  // admin.group in, as docs/security.md says to for reading the files directly.
  mkdirSync(dirs.logDir, { mode: 0o750 });
  chownSync(dirs.logDir, 0, ADMIN_GID);
  cp = await startHostileControlPlane();
});
afterAll(async () => {
  await cp?.close();
  rmSync(root, { recursive: true, force: true });
});

/** `argv` run as nobody (uid and gid 65534), with only the supplementary groups given. */
function asNobody(argv: string[], groups: number[] = []) {
  const who = ['--reuid=65534', '--regid=65534', groups.length > 0 ? `--groups=${groups.join(',')}` : '--clear-groups'];
  return spawnSync('setpriv', [...who, '--', ...argv], { encoding: 'utf8', timeout: 10_000 });
}

const modeOf = (path: string) => statSync(path).mode & 0o7777;

describe('engine logs are readable by root and admin.group only (security review, finding 8)', () => {
  it('writes the log 0640 and its rotated generation too, in a 0750 directory of admin.group; nobody cannot read either, a group member can', { timeout: 90_000 }, async () => {
    const agent = await bootAgentAgainst(cp, {
      dirs,
      nodeId: 'logs-node',
      // Rotation at 4 KiB, which a sim writing 200 lines a second passes in well under the 2 s rotation check.
      env: { LLMGW_ADMIN_GROUP: ADMIN_GROUP, LLMGW_SUPERVISOR_LOG_MAX_BYTES: '4KiB' },
    });
    const id = 'logs-g1-r0';
    cp.send({ case: 'start', value: simStart(id, await freePort(), { gpu: freeFakeGpu(0), args: ['--load-time', '100ms', '--log-rate', '200'] }) });
    await cp.waitFor(shardIs(id, ShardState.READY), 60_000);

    const shards = join(dirs.logDir, 'shards');
    const log = join(shards, `${id}.log`);
    const rotated = `${log}.1`;
    await expect.poll(() => existsSync(rotated), { timeout: 30_000 }).toBe(true);
    for (const path of [log, rotated]) {
      expect(modeOf(path).toString(8), path).toBe('640');
      expect(statSync(path).uid).toBe(0);
      expect(statSync(path).gid).toBe(ADMIN_GID);
    }
    expect(modeOf(shards).toString(8)).toBe('750');
    expect(statSync(shards).gid).toBe(ADMIN_GID);

    // Not in the group: neither the directory's listing nor either log.
    for (const argv of [['ls', shards], ['cat', log], ['cat', rotated]]) {
      const r = asNobody(argv);
      expect(r.status, `${argv.join(' ')} as nobody`).not.toBe(0);
      expect(r.stderr).toMatch(/Permission denied/);
    }
    // In admin.group: the engine's own lines.
    const member = asNobody(['cat', rotated], [ADMIN_GID]);
    expect(member.status, member.stderr).toBe(0);
    expect(member.stdout.length).toBeGreaterThan(0);
    expect(readFileSync(rotated, 'utf8').startsWith(member.stdout.slice(0, 200))).toBe(true);

    expectAgentUnharmed(agent.pid);
  });
});
