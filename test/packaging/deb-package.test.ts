import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../helpers/run-cli.js';
import { suiteDeb } from '../helpers/suite-deb.js';

/*
 * `npm run package` (issue 39, item 5): one .deb that installs the agent on a
 * node with no registry and no Node of its own. Built from this checkout's
 * dist/ (every suite runs the built binary) without compression, unpacked
 * with dpkg-deb -x into a scratch root, and run from there with an empty
 * environment: the runtime, the dependencies and the code are all the
 * package's.
 */

const manifest = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string; scripts: Record<string, string> };
const scratch = mkdtempSync(join(tmpdir(), 'llmgw-deb-test-'));
const root = join(scratch, 'root');
let deb = '';

beforeAll(async () => {
  // Under umask 000, the worst a builder's shell may have: the package's modes must not follow it (security review 4, F10).
  // Built once for the run's files that need a .deb (test/helpers/suite-deb.ts says how).
  const built = await suiteDeb();
  expect(built.exitCode, built.stderr).toBe(0);
  deb = built.deb as string;
  await execa('dpkg-deb', ['-x', deb, root]);
}, 360_000);

afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** The unpacked package's llmgw as its /usr/bin/llmgw runs it, with nothing from the caller's environment. */
function installed(args: string[]) {
  return execa(join(root, 'usr/lib/llmgw/node/bin/node'), [join(root, 'usr/lib/llmgw/bin/run.js'), ...args], {
    reject: false,
    stdin: 'ignore',
    cwd: scratch,
    env: { PATH: '/usr/bin:/bin', HOME: scratch, NO_COLOR: '1' },
    extendEnv: false,
  });
}

describe('npm run package: the .deb', () => {
  it('is named by package, version and architecture, and says what it is', async () => {
    const arch = String((await execa('dpkg', ['--print-architecture'])).stdout).trim();
    expect(basename(deb)).toBe(`llmgw_${manifest.version}_${arch}.deb`);
    expect(manifest.scripts.package).toBe('npm run build && node scripts/package-deb.mjs');
    const fields = String((await execa('dpkg-deb', ['-f', deb])).stdout);
    expect(fields).toMatch(new RegExp(`^Package: llmgw$[\\s\\S]*^Version: ${manifest.version.replaceAll('.', '\\.')}$[\\s\\S]*^Architecture: ${arch}$`, 'm'));
    // What the bundled node and koffi's addon link, at dpkg-shlibdeps' versions; the build fails on a library none of these ships.
    expect(fields).toMatch(/^Depends: libc6 \(>= 2\.34\), libgcc-s1 \(>= 3\.4\), libstdc\+\+6 \(>= 10\.2\), adduser$/m);
    expect(fields).not.toMatch(/^Description: llmgw/m);
    expect(String((await execa('dpkg-deb', ['-f', deb, 'Installed-Size'])).stdout).trim()).toMatch(/^\d+$/);
  });

  it('carries its runtime, its production dependencies and no development ones', () => {
    expect(statSync(join(root, 'usr/lib/llmgw/node/bin/node')).mode & 0o111).not.toBe(0);
    for (const dep of ['@oclif/core', '@connectrpc/connect-node', '@bufbuild/protobuf', 'koffi']) {
      expect(statSync(join(root, 'usr/lib/llmgw/node_modules', dep, 'package.json')).isFile(), dep).toBe(true);
    }
    for (const dev of ['vitest', 'typescript', '@biomejs/biome', 'tsx']) {
      expect(() => statSync(join(root, 'usr/lib/llmgw/node_modules', dev)), `${dev} is a development dependency`).toThrow();
    }
  });

  it('runs as the installed llmgw: --version, discover and agent run --print-config, from the package alone', async () => {
    const version = await installed(['--version']);
    expect(version.exitCode, String(version.stderr)).toBe(0);
    expect(String(version.stdout)).toMatch(new RegExp(`^llmgw/${manifest.version.replaceAll('.', '\\.')} linux-\\w+ node-v\\d+`));
    const discover = await installed(['discover', '--json']);
    expect(discover.exitCode, String(discover.stderr)).toBe(0);
    expect(JSON.parse(String(discover.stdout))).toHaveProperty('inventory');
    const config = join(scratch, 'agent.yaml');
    writeFileSync(config, 'node_id: gpu-01\nserver: http://127.0.0.1:8443\n');
    const printed = await installed(['agent', 'run', '--print-config', '--config', config]);
    expect(printed.exitCode, String(printed.stderr)).toBe(0);
    expect(String(printed.stdout)).toMatch(/^node_id\s+gpu-01\s/m);
    // The shipped example, unedited, names what is missing and exits 78 (the unit does not restart it).
    const example = await installed(['agent', 'run', '--print-config', '--config', join(root, 'etc/llmgw/agent.yaml')]);
    expect(example.exitCode).toBe(78);
    expect(String(example.stderr)).toContain('node_id is required');
  });

  it('sets its modes itself whatever the builder\'s umask: built under umask 000, nothing is group- or world-writable, folders 0755, programs 0755, the rest 0644', async () => {
    const listing = String((await execa('dpkg-deb', ['-c', deb])).stdout).split('\n').filter((l) => l !== '');
    const modes = new Map(listing.map((l) => { const f = l.split(/\s+/); return [f[5] ?? '', f[0] ?? ''] as const; }));
    expect(listing.length).toBeGreaterThan(100);
    expect(listing.filter((l) => /^.....w|^........w/.test(l))).toEqual([]);
    for (const dir of ['./usr/lib/llmgw/', './usr/lib/llmgw/node/', './usr/lib/llmgw/node/bin/', './usr/lib/llmgw/node_modules/', './etc/llmgw/']) expect(modes.get(dir), dir).toBe('drwxr-xr-x');
    for (const program of ['./usr/lib/llmgw/node/bin/node', './usr/lib/llmgw/bin/run.js', './usr/bin/llmgw']) expect(modes.get(program), program).toBe('-rwxr-xr-x');
    for (const file of ['./usr/lib/llmgw/package.json', './lib/systemd/system/llmgw-agent.service']) expect(modes.get(file), file).toBe('-rw-r--r--');
    expect(modes.get('./etc/llmgw/agent.yaml')).toBe('-rw-r-----');
    // Every entry is a folder, a file or a link, and folders and files have one of the modes above.
    expect(new Set([...modes.values()].filter((m) => !m.startsWith('l')))).toEqual(new Set(['drwxr-xr-x', '-rwxr-xr-x', '-rw-r--r--', '-rw-r-----']));
  });

  it('installs a unit that starts the packaged runtime and an llmgw that execs it, and keeps the configuration as a conffile', async () => {
    expect(readFileSync(join(root, 'usr/bin/llmgw'), 'utf8')).toBe('#!/bin/sh\nexec /usr/lib/llmgw/node/bin/node /usr/lib/llmgw/bin/run.js "$@"\n');
    const unit = readFileSync(join(root, 'lib/systemd/system/llmgw-agent.service'), 'utf8');
    expect(unit.split('\n').filter((l) => l.startsWith('ExecStart='))).toEqual(['ExecStart=/usr/lib/llmgw/node/bin/node /usr/lib/llmgw/bin/run.js agent run --config /etc/llmgw/agent.yaml']);
    expect(unit).toContain('KillMode=process');
    const control = join(scratch, 'control');
    await execa('dpkg-deb', ['-e', deb, control]);
    expect(readFileSync(join(control, 'conffiles'), 'utf8')).toBe('/etc/llmgw/agent.yaml\n');
    expect(statSync(join(root, 'etc/llmgw/agent.yaml')).mode & 0o777).toBe(0o640);
    // Upgrades restart a running agent and nothing else; removal stops only the agent; purge deletes state.
    const postinst = readFileSync(join(control, 'postinst'), 'utf8');
    expect(postinst).toContain('adduser --system --group --home /var/lib/llmgw-engine --shell /usr/sbin/nologin llmgw-engine');
    expect(postinst).toMatch(/if \[ -n "\$2" \] && systemctl is-active --quiet llmgw-agent; then\n\s+deb-systemd-invoke restart llmgw-agent\.service/);
    // A purge stops the engines first, then empties the folders, a mount point kept (test/systemd/deb-lifecycle.test.ts runs it).
    expect(readFileSync(join(control, 'postrm'), 'utf8')).toContain('for d in /var/lib/llmgw /var/log/llmgw /etc/llmgw; do purge_dir "$d"; done');
    for (const script of ['postinst', 'prerm', 'postrm']) expect((await execa('sh', ['-n', join(control, script)], { reject: false })).exitCode, script).toBe(0);
  });

  it('ships README.md and the docs/ pages in /usr/share/doc/llmgw, links between them intact, and not in /usr/lib/llmgw', () => {
    const doc = join(root, 'usr/share/doc/llmgw');
    expect(readFileSync(join(doc, 'README.md'), 'utf8')).toBe(readFileSync(join(REPO_ROOT, 'README.md'), 'utf8'));
    const pages = readdirSync(join(REPO_ROOT, 'docs')).filter((f) => f.endsWith('.md'));
    expect(pages).toContain('install.md');
    for (const page of pages) {
      expect(readFileSync(join(doc, 'docs', page), 'utf8'), page).toBe(readFileSync(join(REPO_ROOT, 'docs', page), 'utf8'));
      expect(statSync(join(doc, 'docs', page)).mode & 0o777, page).toBe(0o644);
    }
    expect(() => statSync(join(root, 'usr/lib/llmgw/docs'))).toThrow();
  });

  it('ships the alert rules docs/metrics-alerts.md describes as /usr/share/llmgw/alerts.yaml (promtool-tested in alert-rules.test.ts)', () => {
    const shipped = join(root, 'usr/share/llmgw/alerts.yaml');
    expect(readFileSync(shipped, 'utf8')).toBe(readFileSync(join(REPO_ROOT, 'packaging/alerts.yaml'), 'utf8'));
    expect(statSync(shipped).mode & 0o777).toBe(0o644);
  });

  it("carries Debian's doc files: a DEP-5 copyright naming every bundled package and licence, Node's LICENSE, changelog.gz for this version, the fake-GPU example", async () => {
    const doc = join(root, 'usr/share/doc/llmgw');
    const copyright = readFileSync(join(doc, 'copyright'), 'utf8');
    expect(copyright.split('\n')[0]).toBe('Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/');
    const listed = String((await execa('find', [join(root, 'usr/lib/llmgw/node_modules'), '-name', 'package.json', '-path', '*/node_modules/*/package.json'])).stdout)
      .split('\n')
      .map((p) => p.slice(root.length + 1, -'/package.json'.length))
      .filter((p) => /node_modules\/(@[^/]+\/)?[^/]+$/.test(p));
    for (const dir of ['usr/lib/llmgw/node_modules/yaml', 'usr/lib/llmgw/node_modules/@bufbuild/protobuf']) expect(listed).toContain(dir);
    for (const dir of listed) expect(copyright, dir).toContain(`Files: ${dir}/*\n`);
    // Every licence a Files paragraph names has its own License paragraph.
    const used = new Set([...copyright.matchAll(/^Files: [\s\S]*?^License: (.+)$/gm)].flatMap((m) => (m[1] ?? '').split(/ and | or /)));
    for (const name of used) expect(copyright, name).toMatch(new RegExp(`^License: ${name.replace(/[.+]/g, '\\$&')}\n `, 'm'));
    expect(readFileSync(join(doc, 'node-LICENSE'), 'utf8')).toMatch(/^Node\.js is licensed for use as follows:/);
    const changelog = String((await execa('zcat', [join(doc, 'changelog.gz')])).stdout);
    expect(changelog.split('\n')[0]).toBe(`llmgw (${manifest.version}) unstable; urgency=medium`);
    expect(readFileSync(join(doc, 'examples/fake-gpus/fake-gpus.conf'), 'utf8')).toContain('Environment=LLMGW_FAKE_GPUS=pcie-l40sx4');
    // Nothing in node_modules is a program; llmgw's own entry point names the packaged Node.
    expect(String((await execa('find', [join(root, 'usr/lib/llmgw/node_modules'), '-type', 'f', '-perm', '/111'])).stdout)).toBe('');
    expect(readFileSync(join(root, 'usr/lib/llmgw/bin/run.js'), 'utf8').split('\n')[0]).toBe('#!/usr/lib/llmgw/node/bin/node');
    expect(readFileSync(join(root, 'usr/share/lintian/overrides/llmgw'), 'utf8')).toBe(readFileSync(join(REPO_ROOT, 'packaging/deb/lintian-overrides'), 'utf8'));
  });
});
