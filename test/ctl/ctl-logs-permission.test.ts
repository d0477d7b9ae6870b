import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { copyCliForNobody } from '../helpers/copy-cli-for-nobody.js';

// Permission is only refused to someone other than root: ctl runs as nobody here.
const asRoot = process.getuid?.() === 0;
const hasSetpriv = spawnSync('setpriv', ['--version']).status === 0;

let cli: string;
let dir: string;

beforeAll(() => {
  if (!asRoot || !hasSetpriv) return;
  cli = copyCliForNobody();
  dir = mkdtempSync(join(tmpdir(), 'llmgw-logs-perm-'));
  chmodSync(dir, 0o755);
}, 60_000);
afterAll(() => {
  if (cli) rmSync(cli, { recursive: true, force: true });
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** `llmgw ctl logs …` as nobody, with no agent (nothing listens on the socket the config names). */
function logsAsNobody(args: string[]) {
  const r = spawnSync('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', '--', process.execPath, join(cli, 'bin', 'run.js'), 'ctl', 'logs', ...args], {
    encoding: 'utf8',
    timeout: 15_000,
    env: { PATH: process.env.PATH, NO_COLOR: '1', HOME: '/nonexistent' },
  });
  return { status: r.status, stderr: r.stderr.trim() };
}

/** A log directory as an agent without admin.group leaves it: 0750 root:root, the log 0640 inside. */
function logDir(name: string, fileMode = 0o640): string {
  const logs = join(dir, name);
  mkdirSync(join(logs, 'shards'), { recursive: true, mode: 0o750 });
  chmodSync(logs, 0o750);
  writeFileSync(join(logs, 'shards', 'tiny-1-g7-r0.log'), 'line\n', { mode: fileMode });
  return logs;
}

describe.skipIf(!asRoot || !hasSetpriv)('ctl logs, with the agent down, as a user the log directory shuts out', () => {
  it('says permission denied on the directory, with the chgrp to the admin group, exit 77 (not "no log")', () => {
    const logs = logDir('closed');
    const config = join(dir, 'agent.yaml');
    writeFileSync(config, `admin:\n  socket: ${join(dir, 'none.sock')}\n  group: llmgw-ops\nsupervisor:\n  log_dir: ${logs}\n`, { mode: 0o644 });
    const r = logsAsNobody(['tiny-1-g7-r0', '-n', '1', '--config', config]);
    expect(r.stderr).toBe(`error: permission denied on ${logs} (chgrp llmgw-ops ${logs}, or run as root)`);
    expect(r.status).toBe(77);
  });

  it('names the file when the directory lets the user in and the file does not, and placeholders the group it does not know', () => {
    const logs = logDir('open', 0o600);
    chownSync(logs, 0, 65534);
    chownSync(join(logs, 'shards'), 0, 65534);
    const file = join(logs, 'shards', 'tiny-1-g7-r0.log');
    const r = logsAsNobody(['tiny-1-g7-r0', '--socket', join(dir, 'none.sock'), '--log-dir', logs]);
    expect(r.stderr).toBe(`error: permission denied on ${file} (chgrp <admin.group> ${file} and chmod g+r it, with admin.group from the agent config, or run as root)`);
    expect(r.status).toBe(77);
  });

  it('still says "no log" for a shard whose log is not there', () => {
    const logs = logDir('absent');
    chownSync(logs, 0, 65534);
    chownSync(join(logs, 'shards'), 0, 65534);
    const r = logsAsNobody(['other-0-g1-r0', '--socket', join(dir, 'none.sock'), '--log-dir', logs]);
    expect(r.stderr).toContain('error: no log for shard other-0-g1-r0 at');
    expect(r.status).toBe(1);
  });
});
