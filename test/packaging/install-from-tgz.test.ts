import { mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { agentConfigYaml, agentDirs } from '../helpers/agent-config-yaml.js';
import { REPO_ROOT } from '../helpers/run-cli.js';
import { startControlPlane } from '../helpers/start-control-plane.js';
import { bootLab, labLeftovers, labUnavailableReason, stopAllLabs } from '../helpers/systemd-lab.js';

/*
 * docs/install.md's "From the npm package", from `npm pack`'s tgz alone, installed into a temporary prefix
 * (a GPU node has no checkout): the package brings its example configuration and writes a unit that
 * names where npm put it, whatever the prefix.
 */

const root = mkdtempSync(join(tmpdir(), 'llmgw-tgz-'));
const prefix = join(root, 'prefix');
const LLMGW = join(prefix, 'bin/llmgw');
const PACKAGE_DIR = join(prefix, 'lib/node_modules/llmgw');
const manifest = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string; scripts: Record<string, string> };
let packed: string[] = [];
let installOutput = '';

beforeAll(async () => {
  // --ignore-scripts: dist/ is built already (every suite runs the built binary), and prepack's
  // rebuild would rewrite dist/ under the other suites running from it in parallel.
  const pack = await execa('npm', ['pack', '--ignore-scripts', '--pack-destination', root], { cwd: REPO_ROOT, reject: false, stdin: 'ignore' });
  expect(pack.exitCode, String(pack.stderr)).toBe(0);
  const tgz = join(root, `llmgw-${manifest.version}.tgz`);
  packed = String((await execa('tar', ['tzf', tgz])).stdout).split('\n');
  // The npm cache first: the dependencies are usually there; the registry only when they are not.
  const install = await execa('npm', ['install', '-g', '--prefer-offline', '--no-audit', '--no-fund', '--prefix', prefix, tgz], {
    reject: false,
    stdin: 'ignore',
    all: true,
  });
  installOutput = String(install.all);
  expect(install.exitCode, installOutput).toBe(0);
}, 240_000);

afterAll(async () => {
  await stopAllLabs();
  rmSync(root, { recursive: true, force: true });
});

/** The installed binary, as an operator runs it: through npm's symlink, node found on PATH. */
function llmgw(args: string[]) {
  return execa(LLMGW, args, { reject: false, stdin: 'ignore', env: { NO_COLOR: '1' } });
}

describe('the package from npm pack, installed with npm install -g --prefix', () => {
  it('ships the built binary, the unit template and the example configuration', () => {
    for (const f of ['package/bin/run.js', 'package/dist/commands/agent/install-unit.js', 'package/oclif.manifest.json', 'package/packaging/llmgw-agent.service', 'package/examples/agent.yaml']) {
      expect(packed).toContain(f);
    }
  });

  it('installs without a warning about an install script of llmgw', () => {
    // npm 11 warns about (and does not run) these for a package installed from a tgz: the build
    // belongs to prepack (npm pack) and preprepare (npm ci in a checkout), which it never checks.
    for (const s of ['preinstall', 'install', 'postinstall', 'prepare']) expect(manifest.scripts[s], s).toBeUndefined();
    expect(manifest.scripts.prepack).toMatch(/npm run build/);
    expect(manifest.scripts.preprepare).toMatch(/npm run build/);
    // Only llmgw's own scripts matter here: npm also lists koffi's install script, which it skips
    // and which koffi does not need (its prebuilt binary ships in an optional dependency; STACK.md).
    const warned = [...installOutput.matchAll(/^npm warn install-scripts +(\S+)@\S+ \(/gm)].map((m) => m[1]);
    expect(warned.filter((name) => name !== 'koffi')).toEqual([]);
  });

  it("runs docs/install.md's production steps from the package alone, and writes a unit systemd-analyze verify accepts", async () => {
    const target = join(root, 'node-root');
    mkdirSync(join(target, 'etc/llmgw'), { recursive: true });
    const configPath = join(target, 'etc/llmgw/agent.yaml');

    const example = await llmgw(['agent', 'example-config', '--output', configPath]);
    expect(example.exitCode, String(example.stderr)).toBe(0);
    expect(readFileSync(configPath, 'utf8')).toBe(readFileSync(join(PACKAGE_DIR, 'examples/agent.yaml'), 'utf8'));
    expect(statSync(configPath).mode & 0o777).toBe(0o640);
    // A second run must not replace the node's (by now edited) configuration.
    writeFileSync(configPath, 'node_id: edited\n');
    const again = await llmgw(['agent', 'example-config', '--output', configPath]);
    expect(again.exitCode).toBe(1);
    expect(String(again.stderr)).toMatch(/already exists and is kept: edit it, or pass --force/);
    expect(readFileSync(configPath, 'utf8')).toBe('node_id: edited\n');

    const unit = await llmgw(['agent', 'install-unit', '--root', target, '--json']);
    expect(unit.exitCode, String(unit.stderr)).toBe(0);
    const report = JSON.parse(String(unit.stdout)) as { path: string; execStart: string };
    const unitPath = join(target, 'etc/systemd/system/llmgw-agent.service');
    expect(report.path).toBe(unitPath);
    // The node that ran the installed binary (found on PATH by its #!/usr/bin/env node) and the
    // package's own entry point, both absolute: not /usr/local/bin/llmgw, which this prefix has not.
    const node = String((await execa('sh', ['-c', 'command -v node'])).stdout).trim();
    expect(report.execStart).toBe(`${realpathSync(node)} ${join(realpathSync(PACKAGE_DIR), 'bin/run.js')} agent run --config /etc/llmgw/agent.yaml`);
    expect(statSync(unitPath).mode & 0o777).toBe(0o644);

    const verify = await execa('systemd-analyze', ['verify', unitPath], { reject: false });
    expect(String(verify.stderr)).toBe('');
    expect(verify.exitCode).toBe(0);
  });
});

const unavailable = await labUnavailableReason();

describe.skipIf(unavailable !== undefined)(
  unavailable ? `the installed package's unit under a real systemd (skipped: ${unavailable})` : "the installed package's unit under a real systemd",
  () => {
    afterAll(() => {
      expect(labLeftovers()).toEqual([]);
    });

    it('starts, and its admin socket answers the installed llmgw ctl', { timeout: 60_000 }, async () => {
      const dir = mkdtempSync(join(tmpdir(), 'llmgw-tgz-lab-'));
      const lab = await bootLab();
      onTestFinished(async () => {
        await lab.stop();
        rmSync(dir, { recursive: true, force: true });
      });
      const cp = await startControlPlane();
      const dirs = agentDirs(dir);
      const configPath = join(dir, 'agent.yaml');
      writeFileSync(configPath, agentConfigYaml({ server: cp.url, dirs, nodeId: 'tgz-node' }));

      // install-unit inside the lab, where /run/systemd/system is the lab's own unit directory.
      const unitPath = '/run/systemd/system/llmgw-agent.service';
      const installed = await lab.run([LLMGW, 'agent', 'install-unit', '--config', configPath, '--output', unitPath]);
      expect(installed.exitCode, String(installed.stderr)).toBe(0);
      expect((await lab.run(['systemctl', 'daemon-reload'])).exitCode).toBe(0);
      const started = await lab.run(['systemctl', 'start', 'llmgw-agent']);
      expect(String(started.stderr)).toBe('');
      expect(started.exitCode).toBe(0);
      expect(await lab.show('llmgw-agent', 'ExecMainStatus')).toBe('0');
      const status = await llmgw(['ctl', 'status', '--socket', dirs.socket, '--json']);
      expect(status.exitCode, String(status.stderr)).toBe(0);
      expect(JSON.parse(String(status.stdout))).toMatchObject({ nodeId: 'tgz-node' });
    });
  },
);
