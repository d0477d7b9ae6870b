import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { parse } from 'yaml';
import { REPO_ROOT, runCli } from '../../helpers/run-cli.js';

function tempRoot(): string {
  const root = mkdtempSync(join(tmpdir(), 'llmgw-agent-config-'));
  onTestFinished(() => rmSync(root, { recursive: true, force: true }));
  return root;
}

describe('llmgw dev agent-config', () => {
  it('writes a config with its own node id and dirs, the fake GPUs and lo, that the agent accepts', async () => {
    const dir = join(tempRoot(), 'a1');
    const r = await runCli(['dev', 'agent-config', '--node-id', 'gpu-node-01', '--dir', dir, '--server', 'http://127.0.0.1:8443', '--json'], { cwd: REPO_ROOT });
    expect(r.exitCode, r.stderr).toBe(0);
    const files = JSON.parse(r.stdout);
    expect(files).toEqual({
      nodeId: 'gpu-node-01',
      config: join(dir, 'agent.yaml'),
      stateDir: join(dir, 'state'),
      logDir: join(dir, 'log'),
      socket: join(dir, 'agent.sock'),
      gpus: 'fake',
    });
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    const yaml = parse(readFileSync(files.config, 'utf8'));
    expect(yaml).toMatchObject({ node_id: 'gpu-node-01', server: 'http://127.0.0.1:8443', mgmt_interface: 'lo' });
    expect(yaml.discovery.nvidia_smi).toBe(join(REPO_ROOT, 'bin/fake-nvidia-smi'));
    expect(yaml.discovery.sysfs_root).toBe(join(REPO_ROOT, 'fixtures/sysfs/hgx-h100x8'));

    // The agent's own loader reads it as written, with no error.
    const printed = await runCli(['agent', 'run', '--config', files.config, '--print-config', '--json']);
    expect(printed.exitCode, printed.stderr).toBe(0);
    expect(printed.stdout).toContain(join(dir, 'state'));
  });

  it('refuses a node id that is not printable as one, with exit 2 and nothing written', async () => {
    const root = tempRoot();
    const r = await runCli(['dev', 'agent-config', '--node-id', '../x', '--dir', join(root, 'a1')]);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toContain('--node-id "../x": use 1-128 characters of A-Z a-z 0-9 . _ - starting with a letter or digit');
    expect(() => statSync(join(root, 'a1'))).toThrow();
  });
});
