import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { resolveCtlPaths } from '../../src/ctl/resolve-ctl-paths.js';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-ctl-paths-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function config(name: string, text: string): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

describe('resolveCtlPaths', () => {
  it('takes the socket and log directory from the agent config file', async () => {
    const path = config('agent.yaml', 'node_id: n\nadmin:\n  socket: /srv/llmgw.sock\nsupervisor:\n  log_dir: /srv/logs\n');
    expect(await resolveCtlPaths({ configPath: path, needLogDir: true })).toEqual({
      socket: '/srv/llmgw.sock',
      logDir: '/srv/logs',
      socketSource: `admin.socket in ${path}`,
    });
  });

  it('lets a flag win over the config file', async () => {
    const path = config('agent2.yaml', 'admin:\n  socket: /srv/llmgw.sock\n');
    expect((await resolveCtlPaths({ socket: '/tmp/x.sock', configPath: path })).socket).toBe('/tmp/x.sock');
  });

  it('puts a stored ctl.socket above the stored or default config file, below a --config the operator names', async () => {
    const path = config('agent3.yaml', 'admin:\n  socket: /srv/three.sock\n');
    expect(await resolveCtlPaths({ stored: { socket: '/x', configPath: path } })).toMatchObject({ socket: '/x', socketSource: 'llmgw config ctl.socket' });
    expect((await resolveCtlPaths({ configPath: path, stored: { socket: '/x' } })).socket).toBe('/srv/three.sock');
    expect((await resolveCtlPaths({ stored: { configPath: path } })).socket).toBe('/srv/three.sock');
  });

  it('refuses a named config file that does not parse with exit 78, naming its line, where it talked to the default socket', async () => {
    const broken = config('broken.yaml', 'node_id: n\nadmin: [unclosed\n');
    for (const opts of [{ configPath: broken }, { stored: { configPath: broken } }]) {
      await expect(resolveCtlPaths(opts)).rejects.toMatchObject({
        exitCode: 78,
        message: expect.stringMatching(new RegExp(`^cannot parse the agent config ${broken}:3: .+; fix it, or pass --socket$`)),
      });
    }
  });

  it('does not read a broken named file that --socket makes unneeded, and takes the default socket from a good one without admin.socket', async () => {
    const broken = config('broken2.yaml', 'admin: [unclosed\n');
    expect((await resolveCtlPaths({ socket: '/x.sock', configPath: broken })).socket).toBe('/x.sock');
    const plain = config('plain.yaml', 'node_id: n\n');
    expect(await resolveCtlPaths({ configPath: plain })).toMatchObject({ socket: '/run/llmgw/agent.sock', socketSource: 'default' });
  });

  it('refuses a named config file that does not exist with exit 78, naming it', async () => {
    const missing = join(dir, 'missing.yaml');
    for (const opts of [{ configPath: missing }, { stored: { configPath: missing } }, { socket: '/x', configPath: missing }]) {
      await expect(resolveCtlPaths(opts)).rejects.toMatchObject({ exitCode: 78, message: expect.stringContaining(`agent config ${missing} does not exist`) });
    }
    await expect(resolveCtlPaths({ configPath: dir })).rejects.toMatchObject({ exitCode: 78, message: expect.stringContaining('is not a file') });
  });

  it('does not check a stored ctl.config it does not read: --socket, or a stored ctl.socket, makes it unneeded', async () => {
    const missing = join(dir, 'gone.yaml');
    expect(await resolveCtlPaths({ socket: '/s', stored: { configPath: missing } })).toMatchObject({ socket: '/s' });
    expect(await resolveCtlPaths({ stored: { socket: '/t', configPath: missing } })).toMatchObject({ socket: '/t', socketSource: 'llmgw config ctl.socket' });
    // ctl logs reads supervisor.log_dir from it, unless --log-dir is given; the error says it is the stored one.
    await expect(resolveCtlPaths({ socket: '/s', stored: { configPath: missing }, needLogDir: true })).rejects.toMatchObject({
      exitCode: 78,
      message: expect.stringContaining('it is your stored ctl.config: `llmgw config set ctl.config <agent config>` or `llmgw config unset ctl.config`'),
    });
    expect(await resolveCtlPaths({ socket: '/s', logDir: '/l', stored: { configPath: missing }, needLogDir: true })).toMatchObject({ logDir: '/l' });
  });

  it.skipIf(process.getuid?.() === 0)('refuses a named config file it may not read with exit 77', async () => {
    const path = config('closed.yaml', 'admin:\n  socket: /srv/x.sock\n');
    chmodSync(path, 0o000);
    await expect(resolveCtlPaths({ configPath: path })).rejects.toMatchObject({ exitCode: 77 });
  });

  it('falls back to the defaults for an empty or incomplete config (an unparsable named one is refused, above)', async () => {
    const defaults = { socket: '/run/llmgw/agent.sock', logDir: '/var/log/llmgw', socketSource: 'default' };
    expect(await resolveCtlPaths({ configPath: config('empty.yaml', ''), needLogDir: true })).toEqual(defaults);
    expect(await resolveCtlPaths({ configPath: config('other.yaml', 'node_id: n\nserver: http://127.0.0.1:1\n'), needLogDir: true })).toEqual(defaults);
  });
});
