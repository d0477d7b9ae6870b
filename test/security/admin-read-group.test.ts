import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { agentDirs, startAgentProcess } from '../helpers/agent-process.js';
import { copyCliForNobody } from '../helpers/copy-cli-for-nobody.js';
import { until } from '../helpers/engine-processes.js';

/*
 * Security review 4, F8: every change asked over the admin socket names its
 * caller's uid in the events and the log (cordon already did), and
 * admin.read_group gives operators who may see everything and change
 * nothing. The real agent, and ctl run as other users (setpriv):
 *
 * - a reader: uid 65534, supplementary group staff (50), admin.read_group;
 * - a member: uid 1 (daemon: ctl needs an account in passwd), group users (100), admin.group;
 * - an outsider: uid 2 (bin), no group.
 */

const asRoot = process.getuid?.() === 0;
const hasSetpriv = spawnSync('setpriv', ['--version']).status === 0;
const READER = ['--reuid=65534', '--regid=65534', '--groups=50'];
const MEMBER = ['--reuid=1', '--regid=1', '--groups=100'];
const OUTSIDER = ['--reuid=2', '--regid=2', '--clear-groups'];

let cli = '';
const root = mkdtempSync(join(tmpdir(), 'llmgw-sec-read-group-'));
const dirs = agentDirs(root);

beforeAll(() => {
  if (asRoot && hasSetpriv) cli = copyCliForNobody('llmgw-read-group-cli-');
}, 60_000);
afterAll(() => {
  if (cli) rmSync(cli, { recursive: true, force: true });
  rmSync(root, { recursive: true, force: true });
});

/** `llmgw ctl …` as the user `who`, against the agent's socket. */
function ctlAs(who: string[], args: string[]) {
  const r = spawnSync('setpriv', [...who, '--', process.execPath, join(cli, 'bin', 'run.js'), 'ctl', ...args, '--socket', dirs.socket], {
    encoding: 'utf8',
    timeout: 30_000,
    cwd: '/',
    env: { PATH: process.env.PATH, NO_COLOR: '1', HOME: '/nonexistent' },
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr.trim() };
}

describe.skipIf(!asRoot || !hasSetpriv)('admin.read_group and the uid of every change', () => {
  it('lets a reader see everything and change nothing (one line, exit 77), a member change and be named, an outsider nothing', { timeout: 120_000 }, async () => {
    chmodSync(root, 0o755);
    const agent = startAgentProcess({ server: 'http://127.0.0.1:1', dirs, nodeId: 'read-node', env: { LLMGW_ADMIN_GROUP: 'users', LLMGW_ADMIN_READ_GROUP: 'staff' } });
    await until(() => existsSync(dirs.socket), 'the admin socket', 30_000);
    // Open to every user, the agent deciding by groups; its folder lets them through.
    expect(statSync(dirs.socket).mode & 0o777).toBe(0o666);
    expect(statSync(dirname(dirs.socket)).mode & 0o001).toBe(0o001);

    // The reader reads: status, events.
    const status = ctlAs(READER, ['status']);
    expect(status.stderr).toBe('');
    expect(status.status).toBe(0);
    expect(status.stdout).toContain('read-node');
    expect(ctlAs(READER, ['events']).status).toBe(0);
    // Reading a shard's adapters is a read: the shard is unknown, not the right.
    expect(ctlAs(READER, ['adapters', 'no-such-shard']).stderr).toContain('no-such-shard');
    expect(ctlAs(READER, ['adapters', 'no-such-shard']).status).not.toBe(77);
    // ...and changes nothing, each refusal one line naming the group to join.
    for (const [args, method] of [
      [['adopt'], 'Adopt'],
      [['cordon', '--reason', 'reader'], 'Cordon'],
      [['gpu', 'clear', '0'], 'ClearGpuFault'],
      [['drain', '--all'], 'Drain'],
      [['sleep', 'no-such-shard'], 'Sleep'],
      [['wake', 'no-such-shard'], 'Wake'],
      [['adapters', 'no-such-shard', '--unload', 'x'], 'ChangeAdapters'],
    ] as const) {
      const r = ctlAs(READER, [...args]);
      expect(r.stderr, args.join(' ')).toBe(`error: uid 65534 is in admin.read_group (staff), which may read but not change the node: ${method} refused; ask to be added to users`);
      expect(r.status, args.join(' ')).toBe(77);
    }
    // Nothing of it happened: the node is not cordoned.
    expect(ctlAs(READER, ['status']).stdout).not.toContain('cordoned');

    // The look-alike: a member of admin.group still changes the node, and is named in the events and the log.
    const adopt = ctlAs(MEMBER, ['adopt']);
    expect(adopt.stderr).toBe('');
    expect(adopt.status).toBe(0);
    expect(ctlAs(MEMBER, ['drain', '--all']).status).toBe(0);
    const events = ctlAs(MEMBER, ['events']);
    expect(events.stdout).toContain('ctl adopt asked by uid 1');
    expect(events.stdout).toContain('ctl drain (all: 0 shards) asked by uid 1');
    await until(() => agent.logs().some((l) => l.msg === 'an operator asked a change over the admin socket' && l.uid === 1 && l.act === 'adopt'), 'the audit line', 20_000);
    // A reader's refused change is not on record as asked.
    expect(agent.logs().filter((l) => l.msg === 'an operator asked a change over the admin socket' && l.uid === 65534)).toEqual([]);

    // Someone in neither group: refused at connect, naming both groups.
    const outsider = ctlAs(OUTSIDER, ['status']);
    expect(outsider.stderr).toContain('uid 2 is in neither admin.group (users) nor admin.read_group (staff)');
    expect(outsider.status).toBe(77);
  });
});
