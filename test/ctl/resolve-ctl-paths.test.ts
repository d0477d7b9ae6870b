import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
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
    expect(await resolveCtlPaths({ configPath: path, needLogDir: true })).toEqual({ socket: '/srv/llmgw.sock', logDir: '/srv/logs' });
  });

  it('lets a flag win over the config file', async () => {
    const path = config('agent2.yaml', 'admin:\n  socket: /srv/llmgw.sock\n');
    expect((await resolveCtlPaths({ socket: '/tmp/x.sock', configPath: path })).socket).toBe('/tmp/x.sock');
  });

  it('falls back to the defaults for a missing, unparsable or incomplete config', async () => {
    const defaults = { socket: '/run/llmgw/agent.sock', logDir: '/var/log/llmgw' };
    expect(await resolveCtlPaths({ configPath: join(dir, 'missing.yaml'), needLogDir: true })).toEqual(defaults);
    expect(await resolveCtlPaths({ configPath: config('bad.yaml', 'admin: [\n'), needLogDir: true })).toEqual(defaults);
    expect(await resolveCtlPaths({ configPath: config('empty.yaml', ''), needLogDir: true })).toEqual(defaults);
  });
});
