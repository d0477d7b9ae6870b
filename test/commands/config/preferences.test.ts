import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, onTestFinished } from 'vitest';
import { runCli } from '../../helpers/run-cli.js';

let home: string;
/** A private XDG_CONFIG_HOME per test, and none of the variables that would outrank it. */
let env: Record<string, string | undefined>;

beforeEach(() => {
  home = mkdtempSync(join(tmpdir(), 'llmgw-xdg-'));
  env = { XDG_CONFIG_HOME: home, LLMGW_SOCKET: undefined, LLMGW_CONFIG: undefined, LLMGW_JSON: undefined, LLMGW_COLOR: undefined };
});
afterEach(() => rmSync(home, { recursive: true, force: true }));

const cli = (args: string[], extra: Record<string, string | undefined> = {}) => runCli(args, { env: { ...env, ...extra }, extendEnv: true });

describe('llmgw config', () => {
  it('set ctl.socket makes ctl status talk to that socket (the error names it), and --socket still wins', async () => {
    const set = await cli(['config', 'set', 'ctl.socket', '/x']);
    expect(set.exitCode).toBe(0);
    expect(JSON.parse(readFileSync(join(home, 'llmgw', 'config.json'), 'utf8'))).toEqual({ ctl: { socket: '/x' } });

    // Both the fast path (plain form) and oclif (--log-level sends it there) read the preference.
    for (const extra of [[], ['--log-level', 'warn']]) {
      const status = await cli(['ctl', 'status', ...extra]);
      expect(status.exitCode).toBe(69);
      expect(status.stderr).toContain('no socket on /x;');
    }
    const flag = await cli(['ctl', 'status', '--socket', '/y']);
    expect(flag.stderr).toContain('no socket on /y;');
    const byEnv = await cli(['ctl', 'status'], { LLMGW_SOCKET: '/z' });
    expect(byEnv.stderr).toContain('no socket on /z;');
  });

  it('talks to the stored socket: a real listener there sees ctl connect', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-prefsock-'));
    const sock = join(dir, 'agent.sock');
    const server = createServer((c) => c.destroy());
    onTestFinished(() => {
      server.close();
      rmSync(dir, { recursive: true, force: true });
    });
    await new Promise<void>((resolve) => server.listen(sock, resolve));
    let connections = 0;
    server.on('connection', () => connections++);
    await cli(['config', 'set', 'ctl.socket', sock]);
    const r = await cli(['ctl', 'status', '--json']);
    expect(r.exitCode).not.toBe(0);
    expect(connections).toBeGreaterThan(0);
  });

  it('list names each value and its source, in text and --json', async () => {
    await cli(['config', 'set', 'color', 'never']);
    const file = join(home, 'llmgw', 'config.json');
    const json = await cli(['config', 'list', '--json'], { LLMGW_JSON: 'true' });
    expect(json.exitCode).toBe(0);
    const list = JSON.parse(json.stdout);
    expect(list.file).toBe(file);
    const bykey = Object.fromEntries(list.preferences.map((p: { key: string; value: unknown; source: string }) => [p.key, [p.value, p.source]]));
    expect(bykey).toEqual({
      'ctl.socket': ['/run/llmgw/agent.sock', 'default'],
      'ctl.config': ['/etc/llmgw/agent.yaml', 'default'],
      'output.json': [true, 'env LLMGW_JSON'],
      color: ['never', `llmgw config (${file})`],
    });
    const text = await cli(['config', 'list']);
    expect(text.stdout).toMatch(/^color +never +llmgw config \(/m);
    expect(text.stdout).toMatch(/^ctl\.socket +\/run\/llmgw\/agent\.sock +default$/m);
  });

  it('list says a socket comes from the stored ctl.config when that agent config names one', async () => {
    const agent = join(home, 'agent.yaml');
    writeFileSync(agent, 'admin:\n  socket: /srv/b.sock');
    await cli(['config', 'set', 'ctl.config', agent]);
    const r = await cli(['config', 'get', 'ctl.socket', '--json']);
    expect(JSON.parse(r.stdout)).toMatchObject({ key: 'ctl.socket', value: '/srv/b.sock', source: `admin.socket in ${agent}` });
  });

  it('set ctl.config refuses a file that does not exist (exit 78, naming it), and stores nothing', async () => {
    const missing = join(home, 'nope.yaml');
    const r = await cli(['config', 'set', 'ctl.config', missing]);
    expect(r.exitCode).toBe(78);
    expect(r.stderr).toBe(
      `error: agent config ${missing} does not exist; write it first (\`llmgw agent example-config --output ${missing}\`) or give the path of the agent's config; nothing was stored`,
    );
    expect(() => readFileSync(join(home, 'llmgw', 'config.json'))).toThrow(/ENOENT/);
  });

  it('a stored ctl.config whose file went away is shown and flagged by list and get, and does not stop ctl --socket', async () => {
    const agent = join(home, 'agent.yaml');
    writeFileSync(agent, 'admin:\n  socket: /srv/b.sock');
    expect((await cli(['config', 'set', 'ctl.config', agent])).exitCode).toBe(0);
    rmSync(agent);
    const list = await cli(['config', 'list']);
    expect(list.exitCode).toBe(0);
    expect(list.stdout).toMatch(new RegExp(`^ctl\\.config +${agent.replace(/[.]/g, '\\.')} ⚠ +llmgw config \\(`, 'm'));
    expect(list.stdout).toContain(`⚠ ctl.config: agent config ${agent} does not exist; it is your stored ctl.config`);
    const json = JSON.parse((await cli(['config', 'list', '--json'])).stdout);
    const bykey = Object.fromEntries(json.preferences.map((p: { key: string }) => [p.key, p]));
    expect(bykey['ctl.config']).toMatchObject({ value: agent, problem: expect.stringContaining('does not exist') });
    expect(bykey['ctl.socket']).toMatchObject({ value: '/run/llmgw/agent.sock', problem: expect.stringContaining('ctl refuses it: agent config') });
    const get = await cli(['config', 'get', 'ctl.socket']);
    expect(get.exitCode).toBe(0);
    expect(get.stdout).toBe('/run/llmgw/agent.sock  (default)');
    expect(get.stderr).toContain('⚠ ctl refuses it: agent config');
    // ctl needs it only to find the socket: with --socket it is not read.
    const status = await cli(['ctl', 'status', '--socket', '/x']);
    expect(status.exitCode).toBe(69);
    const without = await cli(['ctl', 'status']);
    expect(without.exitCode).toBe(78);
    expect(without.stderr).toContain('it is your stored ctl.config');
  });

  it('output.json makes ctl print JSON without --json; LLMGW_JSON=false undoes it', async () => {
    await cli(['config', 'set', 'output.json', 'true']);
    const r = await cli(['ctl', 'status', '--socket', '/x']);
    expect(JSON.parse(r.stdout)).toMatchObject({ error: { kind: 'unreachable', exitCode: 69 } });
    const human = await cli(['ctl', 'status', '--socket', '/x'], { LLMGW_JSON: 'false' });
    expect(human.stdout).toBe('');
  });

  it('color always colours output that is not a terminal; NO_COLOR still wins', async () => {
    await cli(['config', 'set', 'color', 'always']);
    const bold = '\u001b[1m';
    expect((await cli(['config', 'list'], { NO_COLOR: undefined, FORCE_COLOR: undefined })).stdout).toContain(bold);
    expect((await cli(['config', 'list'], { NO_COLOR: '1' })).stdout).not.toContain(bold);
    await cli(['config', 'set', 'color', 'never']);
    expect((await cli(['config', 'list'], { NO_COLOR: undefined, FORCE_COLOR: undefined, LLMGW_COLOR: 'always' })).stdout).toContain(bold);
  });

  it('refuses an unknown key with exit 2 and the nearest name, in one line', async () => {
    const r = await cli(['config', 'set', 'ctl.sockt', '/x']);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toBe('error: unknown preference "ctl.sockt"; did you mean ctl.socket?');
    expect((await cli(['config', 'get', 'colour'])).stderr).toBe('error: unknown preference "colour"; did you mean color?');
  });

  it('refuses a bad value with exit 2, showing what was given, and stores nothing', async () => {
    for (const [key, value, accepts] of [
      ['output.json', 'maybe', 'true or false'],
      ['ctl.socket', 'relative.sock', 'an absolute path'],
      ['color', 'sometimes', 'auto, always, never'],
    ]) {
      const r = await cli(['config', 'set', key as string, value as string]);
      expect(r.exitCode).toBe(2);
      expect(r.stderr).toBe(`error: ${key} must be ${accepts}, got "${value}"`);
    }
    expect(() => readFileSync(join(home, 'llmgw', 'config.json'))).toThrow(/ENOENT/);
  });

  it('unset removes a preference, and the default applies again', async () => {
    await cli(['config', 'set', 'ctl.socket', '/x']);
    expect((await cli(['config', 'unset', 'ctl.socket'])).stdout).toBe('ctl.socket unset');
    expect((await cli(['config', 'get', 'ctl.socket'])).stdout).toBe('/run/llmgw/agent.sock  (default)');
    expect((await cli(['config', 'unset', 'ctl.socket'])).stdout).toBe('ctl.socket was not set');
  });

  it('a preferences file broken by hand is a config error naming it (exit 78), not ignored', async () => {
    const file = join(home, 'llmgw', 'config.json');
    await cli(['config', 'set', 'color', 'never']);
    writeFileSync(file, '{"ctl": {"socket": "relative"}}');
    const r = await cli(['ctl', 'status']);
    expect(r.exitCode).toBe(78);
    expect(r.stderr).toBe(`error: ctl.socket in ${file} must be an absolute path, got "relative"; fix it with \`llmgw config set ctl.socket …\``);
    // The advice works: set repairs the file.
    expect((await cli(['config', 'set', 'ctl.socket', '/x'])).exitCode).toBe(0);
    expect((await cli(['ctl', 'status'])).stderr).toContain('no socket on /x;');
    // A file that is not JSON is refused by set as well, and left as it was.
    writeFileSync(file, '{broken');
    const set = await cli(['config', 'set', 'color', 'never']);
    expect(set.exitCode).toBe(78);
    expect(set.stderr).toMatch(new RegExp(`^error: cannot open the CLI preferences in ${join(home, 'llmgw')}: .+; fix or remove ${file}$`));
    expect(readFileSync(file, 'utf8')).toBe('{broken');
  });
});
