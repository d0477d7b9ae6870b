import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { BIN, REPO_ROOT, runCli } from '../helpers/run-cli.js';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-install-unit-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('llmgw agent install-unit', () => {
  it('writes the packaged unit with ExecStart naming this node and this checkout by absolute path', async () => {
    const out = join(dir, 'llmgw-agent.service');
    const r = await runCli(['agent', 'install-unit', '--output', out, '--config', '/etc/llmgw/agent.yaml']);
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stdout).toContain(`wrote ${out}`);
    const text = readFileSync(out, 'utf8');
    expect(text.match(/^ExecStart=.*$/gm)).toEqual([`ExecStart=${process.execPath} ${BIN} agent run --config /etc/llmgw/agent.yaml`]);
    // Everything else is the shipped unit, line for line.
    const shipped = readFileSync(join(REPO_ROOT, 'packaging/llmgw-agent.service'), 'utf8');
    expect(text.replace(/^ExecStart=.*$/m, '')).toContain(shipped.replace(/^ExecStart=.*$/m, ''));
    expect(statSync(out).mode & 0o777).toBe(0o644);
  });

  it('prints the unit with --output - and writes nothing', async () => {
    const r = await runCli(['agent', 'install-unit', '--output', '-']);
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^\[Service\]$/m);
    expect(r.stdout).toContain(`ExecStart=${process.execPath} ${BIN} agent run --config /etc/llmgw/agent.yaml`);
  });

  it('refuses a relative --config with a usage error naming it (systemd starts units in /)', async () => {
    const r = await runCli(['agent', 'install-unit', '--output', '-', '--config', 'agent.yaml']);
    expect(r.exitCode).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/--config agent\.yaml is not an absolute path/);
  });

  it('refuses a --config systemd would split or expand, rather than run something else', async () => {
    const r = await runCli(['agent', 'install-unit', '--output', '-', '--config', '/etc/llmgw/my agent.yaml']);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toMatch(/holds a character systemd would split or expand/);
    const pct = await runCli(['agent', 'install-unit', '--output', '-', '--config', '/etc/llmgw/%n.yaml']);
    expect(pct.exitCode).toBe(2);
  });

  it('says where it could not write, exit 1', async () => {
    const r = await runCli(['agent', 'install-unit', '--output', join(dir, 'missing-dir/llmgw-agent.service')]);
    expect(r.exitCode).toBe(1);
    expect(r.stderr).toMatch(/^error: cannot write .*missing-dir\/llmgw-agent\.service: /);
  });

  it("with --root, looks for the image's configuration, not this host's", async () => {
    // A configuration this host has and the image does not.
    const hostConfig = join(dir, 'host-agent.yaml');
    writeFileSync(hostConfig, 'node_id: host\n');
    const root = join(dir, 'imgroot');
    const r = await runCli(['agent', 'install-unit', '--root', root, '--config', hostConfig, '--json']);
    expect(r.exitCode, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ path: join(root, 'etc/systemd/system/llmgw-agent.service'), configExists: false, configChecked: join(root, hostConfig) });
    const text = await runCli(['agent', 'install-unit', '--root', root, '--config', hostConfig]);
    expect(text.stdout).toContain(`note: ${join(root, hostConfig)} does not exist yet`);
    mkdirSync(dirname(join(root, hostConfig)), { recursive: true });
    writeFileSync(join(root, hostConfig), 'node_id: image\n');
    expect(JSON.parse((await runCli(['agent', 'install-unit', '--root', root, '--config', hostConfig, '--json'])).stdout)).toMatchObject({ configExists: true });
  });

  it('takes --root or --output, not both', async () => {
    const r = await runCli(['agent', 'install-unit', '--root', dir, '--output', '-']);
    expect(r.exitCode).toBe(2);
  });
});

describe('llmgw agent example-config', () => {
  it('prints examples/agent.yaml of the package', async () => {
    const r = await runCli(['agent', 'example-config']);
    expect(r.exitCode, r.stderr).toBe(0);
    // execa strips the final newline of what it captured.
    expect(r.stdout).toBe(readFileSync(join(REPO_ROOT, 'examples/agent.yaml'), 'utf8').replace(/\n$/, ''));
  });

  it('replaces an existing file only with --force', async () => {
    const out = join(dir, 'agent.yaml');
    expect((await runCli(['agent', 'example-config', '--output', out])).exitCode).toBe(0);
    const kept = await runCli(['agent', 'example-config', '--output', out, '--json']);
    expect(kept.exitCode).toBe(1);
    expect(JSON.parse(kept.stdout)).toMatchObject({ error: { kind: 'failure', exitCode: 1 } });
    const forced = await runCli(['agent', 'example-config', '--output', out, '--force', '--json']);
    expect(forced.exitCode, forced.stderr).toBe(0);
    expect(JSON.parse(forced.stdout)).toMatchObject({ path: out });
  });

  it('says to create the directory an --output lacks, and creates nothing', async () => {
    const missing = join(dir, 'no-such-dir');
    const r = await runCli(['agent', 'example-config', '--output', join(missing, 'agent.yaml')]);
    expect(r.exitCode).toBe(1);
    expect(r.stderr).toBe(`error: cannot write ${missing}/agent.yaml: no such file (create its directory first: install -d -m 0755 ${missing})`);
    expect(() => statSync(missing)).toThrow(/ENOENT/);
  });
});
