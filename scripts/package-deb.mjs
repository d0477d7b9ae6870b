#!/usr/bin/env node
// `npm run package`: one .deb a GPU node installs with no registry and no Node of its own
// (Debian 12 ships Node 18; the agent needs 20.19): the built agent, its production
// dependencies, the Node runtime that built it, the systemd unit, an example configuration
// and the engine account's set-up. Runs from a checkout whose dist/ is built.
//
//   node scripts/package-deb.mjs [--out DIR] [--compress gzip|xz|none]
//
// Writes DIR/llmgw_<version>_<arch>.deb (DIR defaults to ./packages) and prints its path.
import { execFileSync } from 'node:child_process';
import { chmodSync, cpSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { gzipSync } from 'node:zlib';
import { renderCopyright } from './deb-copyright.mjs';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..');
/** Where the package puts itself; the unit, the wrapper and the README name these paths. */
const PREFIX = '/usr/lib/llmgw';
const NODE = `${PREFIX}/node/bin/node`;
const RUN_JS = `${PREFIX}/bin/run.js`;
const CONFIG = '/etc/llmgw/agent.yaml';
const DOC = '/usr/share/doc/llmgw';
/**
 * What the bundled Node and koffi's glibc build link (ldd: libc, libm, libdl, libpthread,
 * libgcc_s, libstdc++), at the versions dpkg-shlibdeps derived from their symbols (Node
 * v20: libc6 2.34, libgcc-s1 3.4, libstdc++6 5.2; koffi.node: libstdc++6 10.2). The build
 * checks that every library ldd names belongs to one of these packages (checkLinkedPackages).
 */
const DEPENDS = 'libc6 (>= 2.34), libgcc-s1 (>= 3.4), libstdc++6 (>= 10.2), adduser';
/** Where a Node install keeps its LICENSE (the official tarball's, NodeSource's and Debian's layouts). */
const nodeLicenseCandidates = () => [join(dirname(process.execPath), '..', 'LICENSE'), join(dirname(process.execPath), '..', 'share', 'doc', 'node', 'LICENSE'), '/usr/share/doc/nodejs/LICENSE'];

/**
 * Every mode in the tree set, whatever the builder's umask and the checkout's
 * modes (security review 4, F10: umask 002 made /usr/lib/llmgw and node/
 * group-writable, and cpSync keeps a checkout's 0664 files): folders 0755,
 * files 0755 when any execute bit is set, else 0644; the exceptions after.
 * Links are left as they are (their mode is not used). Root's code is then
 * writable by root alone once dpkg-deb --root-owner-group makes it root's.
 */
function normaliseModes(dir) {
  chmodSync(dir, 0o755);
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    const st = lstatSync(path);
    if (st.isDirectory()) normaliseModes(path);
    else if (st.isFile()) chmodSync(path, st.mode & 0o111 ? 0o755 : 0o644);
    else if (!st.isSymbolicLink()) fail(`${path} is neither a file, a folder nor a link: a package holds no such thing`);
  }
}

function dropExecuteBits(dir) {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    const st = lstatSync(path);
    if (st.isDirectory()) dropExecuteBits(path);
    else if (st.isFile()) chmodSync(path, 0o644);
  }
}

const DEV_DOTFILE = /^\.(eslintrc(\..*)?|npmignore|gitattributes|gitignore|editorconfig|travis\.yml|prettierrc(\..*)?)$/;
function removeDevDotfiles(dir) {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    const st = lstatSync(path);
    if (st.isDirectory()) removeDevDotfiles(path);
    else if (DEV_DOTFILE.test(name)) rmSync(path);
  }
}

/** ELF files in the tree: the runtime and native addons (what ldd and Depends are about). */
function elfFiles(dir) {
  const out = [];
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    const st = lstatSync(path);
    if (st.isDirectory()) out.push(...elfFiles(path));
    else if (st.isFile() && st.size > 4 && readFileSync(path).subarray(0, 4).toString('latin1') === '\x7fELF') out.push(path);
  }
  return out;
}

/** Every library an ELF file links must come from a package Depends names: a new Node that links a new library fails the build, not the node. */
function checkLinkedPackages(files) {
  const depends = new Set(DEPENDS.split(',').map((d) => d.trim().split(/\s/)[0]));
  for (const file of files) {
    const ldd = execFileSync('ldd', [file], { encoding: 'utf8' });
    for (const m of ldd.matchAll(/=>\s+(\/\S+)/g)) {
      const owner = ownerOf(m[1]);
      if (!depends.has(owner)) fail(`${file} links ${m[1]} from package ${owner ?? '(none: not installed by dpkg)'}, which Depends (${DEPENDS}) does not name: add it in scripts/package-deb.mjs`);
    }
  }
}

/** The package dpkg says installed `path`, under its /lib or /usr/lib name (merged /usr) or its real path. */
function ownerOf(path) {
  const names = [path, path.replace(/^\/lib\//, '/usr/lib/'), path.replace(/^\/usr\/lib\//, '/lib/'), realpathSync(path)];
  for (const p of new Set(names)) {
    try {
      return execFileSync('dpkg', ['-S', p], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).split(':')[0];
    } catch {
      // Not this name: the next.
    }
  }
  return undefined;
}

function fail(message) {
  process.stderr.write(`error: ${message}\n`);
  process.exit(1);
}

const { values } = (() => {
  try {
    return parseArgs({ options: { out: { type: 'string', default: join(REPO, 'packages') }, compress: { type: 'string', default: 'gzip' } } });
  } catch (err) {
    fail(`${err.message}; usage: node scripts/package-deb.mjs [--out DIR] [--compress gzip|xz|none]`);
  }
})();
if (!['gzip', 'xz', 'none'].includes(values.compress)) fail(`--compress ${values.compress} is not gzip, xz or none`);
for (const built of ['dist/commands', 'oclif.manifest.json', 'dist/agent/install/render-agent-unit.js']) {
  if (!existsSync(join(REPO, built))) fail(`${built} is missing: run npm run build first (npm run package does)`);
}

const pkg = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8'));
const arch = execFileSync('dpkg', ['--print-architecture'], { encoding: 'utf8' }).trim();
const stage = mkdtempSync(join(tmpdir(), 'llmgw-deb-'));
const root = join(stage, 'root');
const at = (p) => join(root, p);
/** The production dependencies' folders in the checkout, nested ones too. */
let listed = [];

try {
  // The package's own files, as `npm pack` would ship them ("files" in package.json); the docs go to /usr/share/doc below.
  for (const f of [...pkg.files.filter((f) => f !== 'docs'), 'package.json']) {
    if (existsSync(join(REPO, f))) cpSync(join(REPO, f), at(`${PREFIX}/${f}`), { recursive: true, dereference: true });
  }
  // Production dependencies only, from the lockfile's tree as installed (no registry).
  listed = execFileSync('npm', ['ls', '--omit=dev', '--all', '--parseable'], { cwd: REPO, encoding: 'utf8' }).split('\n').filter((p) => p.startsWith(join(REPO, 'node_modules')));
  const outermost = listed.filter((p) => !listed.some((q) => q !== p && p.startsWith(`${q}/`)));
  for (const p of outermost) cpSync(p, at(`${PREFIX}/${relative(REPO, p)}`), { recursive: true, dereference: true });
  // koffi's prebuilt for musl systems: dead weight on Debian (glibc), and a binary no Debian library satisfies.
  for (const dir of readdirSync(at(`${PREFIX}/node_modules/@koromix`), { withFileTypes: true }).filter((d) => d.isDirectory())) {
    for (const sub of readdirSync(join(dir.parentPath ?? dir.path, dir.name))) if (sub.startsWith('musl')) rmSync(join(dir.parentPath ?? dir.path, dir.name, sub), { recursive: true });
  }
  // Dependencies' development leftovers (linter, VCS and npm settings): not part of what runs.
  removeDevDotfiles(at(`${PREFIX}/node_modules`));
  // The runtime that built and tested it.
  mkdirSync(dirname(at(NODE)), { recursive: true });
  cpSync(process.execPath, at(NODE));
  chmodSync(at(NODE), 0o755);
  checkLinkedPackages(elfFiles(at(PREFIX)));
  // `llmgw` on PATH: exec, so that under systemd the agent is the unit's main process.
  mkdirSync(at('/usr/bin'), { recursive: true });
  writeFileSync(at('/usr/bin/llmgw'), `#!/bin/sh\nexec ${NODE} ${RUN_JS} "$@"\n`, { mode: 0o755 });

  // The unit, with the installed paths; a local change goes in a drop-in, which an upgrade leaves alone.
  const { renderAgentUnit, INSTALLED_UNIT_NOTE } = await import(join(REPO, 'dist/agent/install/render-agent-unit.js'));
  // Without the template's opening comment, which is about install-unit's copy.
  const template = readFileSync(join(REPO, 'packaging/llmgw-agent.service'), 'utf8').replace(/^(#.*\n)+/, '');
  const unit = renderAgentUnit(template, { nodePath: NODE, binPath: RUN_JS, configPath: CONFIG }).replace(
    INSTALLED_UNIT_NOTE,
    '# Installed by the llmgw .deb with its own Node; put local changes in a drop-in\n# (systemctl edit llmgw-agent): an upgrade replaces this file.\n',
  );
  mkdirSync(at('/lib/systemd/system'), { recursive: true });
  writeFileSync(at('/lib/systemd/system/llmgw-agent.service'), unit, { mode: 0o644 });
  // The gang port held across agent restarts (security review 4, F5); shipped, not enabled: its address is gang_addr's.
  cpSync(join(REPO, 'packaging/llmgw-gang.socket'), at('/lib/systemd/system/llmgw-gang.socket'));
  chmodSync(at('/lib/systemd/system/llmgw-gang.socket'), 0o644);

  // The example configuration, a conffile: node_id ships empty, so an unedited node exits 78 and says so.
  mkdirSync(at('/etc/llmgw'), { recursive: true, mode: 0o755 });
  cpSync(join(REPO, 'examples/agent.yaml'), at(CONFIG));
  chmodSync(at(CONFIG), 0o640);

  // The Prometheus alert rules README's alerts section describes, for rule_files (test/packaging/alert-rules.test.ts).
  mkdirSync(at('/usr/share/llmgw'), { recursive: true });
  cpSync(join(REPO, 'packaging/alerts.yaml'), at('/usr/share/llmgw/alerts.yaml'));
  chmodSync(at('/usr/share/llmgw/alerts.yaml'), 0o644);

  // The operator's pages where Debian keeps a package's documentation, README.md beside docs/ so that
  // their relative links hold (docs/README.md says the package installs them here).
  mkdirSync(at('/usr/share/doc/llmgw/docs'), { recursive: true });
  cpSync(join(REPO, 'README.md'), at('/usr/share/doc/llmgw/README.md'));
  for (const page of readdirSync(join(REPO, 'docs')).filter((f) => f.endsWith('.md'))) cpSync(join(REPO, 'docs', page), at(`/usr/share/doc/llmgw/docs/${page}`));
  // Debian's doc files: the copyright (DEP-5, every bundled component's licence), Node's own
  // LICENSE it points at, the changelog (a native package's: changelog.gz, policy 12.7).
  mkdirSync(at(DOC), { recursive: true });
  const nodeLicense = nodeLicenseCandidates().find((p) => existsSync(p));
  if (!nodeLicense) fail(`no LICENSE for the Node runtime at ${nodeLicenseCandidates().join(', ')}: the package must carry Node's notices`);
  cpSync(nodeLicense, at(`${DOC}/node-LICENSE`));
  writeFileSync(at(`${DOC}/copyright`), renderCopyright({ version: pkg.version, nodeVersion: process.version, nodeLicenseAt: nodeLicense, dependencyDirs: listed.map((p) => at(`${PREFIX}/${relative(REPO, p)}`)), root }));
  const changelog = readFileSync(join(REPO, 'packaging/deb/changelog'), 'utf8');
  const top = /^llmgw \(([^)]+)\)/.exec(changelog)?.[1];
  if (top !== pkg.version) fail(`packaging/deb/changelog's newest entry is for ${top}, package.json says ${pkg.version}: add an entry for it`);
  writeFileSync(at(`${DOC}/changelog.gz`), gzipSync(changelog, { level: 9 }));
  // What lintian says of the package that is so on purpose (each with its reason): packaging/deb/lintian-overrides.
  mkdirSync(at('/usr/share/lintian/overrides'), { recursive: true });
  cpSync(join(REPO, 'packaging/deb/lintian-overrides'), at('/usr/share/lintian/overrides/llmgw'));
  // Trying the package on a machine without GPUs: the agent's configuration and the unit's drop-in (their header says how).
  cpSync(join(REPO, 'packaging/fake-gpus'), at(`${DOC}/examples/fake-gpus`), { recursive: true });

  // Modes by kind, not by umask; then the ones that differ: the conffile is llmgw-ops' to read (postinst chgrps it).
  normaliseModes(root);
  chmodSync(at(CONFIG), 0o640);
  // Nothing in node_modules is run as a program: the packaged Node loads it. Its files' execute
  // bits (scripts for a node on PATH, or set by mistake) would be programs no Depends satisfies.
  dropExecuteBits(at(`${PREFIX}/node_modules`));
  // llmgw's own entry point runs on the packaged Node when run directly, as /usr/bin/llmgw runs it.
  writeFileSync(at(RUN_JS), readFileSync(at(RUN_JS), 'utf8').replace(/^#!.*\n/, `#!${NODE}\n`));

  const installedKb = Number(execFileSync('du', ['-sk', root], { encoding: 'utf8' }).split('\t')[0]);
  mkdirSync(at('DEBIAN'), { recursive: true });
  writeFileSync(
    at('DEBIAN/control'),
    [
      'Package: llmgw',
      `Version: ${pkg.version}`,
      `Architecture: ${arch}`,
      'Maintainer: llmgw maintainers <maintainers@llmgw.invalid>',
      `Installed-Size: ${installedKb}`,
      `Depends: ${DEPENDS}`,
      // nft keeps a sleep-mode engine's port from other local users (sleep-port-guards.ts); without it such starts are refused.
      'Recommends: systemd, nftables',
      'Section: admin',
      'Priority: optional',
      'Homepage: https://github.com/llmgw/llmgw-node',
      'Description: agent that runs LLM inference engines on GPU nodes, and its CLI',
      ' The llmgw node agent, which runs inference engines (vLLM, SGLang) on a GPU',
      ' node for a control plane, and the operator CLI around it, with the Node',
      ' runtime it runs on.',
      ' Engines run as the llmgw-engine account; members of llmgw-ops may use',
      ' `llmgw ctl` once admin.group names it. Edit /etc/llmgw/agent.yaml, then',
      ' `systemctl enable --now llmgw-agent`.',
      '',
    ].join('\n'),
  );
  writeFileSync(at('DEBIAN/conffiles'), `${CONFIG}\n`);
  for (const script of ['postinst', 'prerm', 'postrm']) {
    cpSync(join(REPO, 'packaging/deb', script), at(`DEBIAN/${script}`));
    chmodSync(at(`DEBIAN/${script}`), 0o755);
  }
  chmodSync(at('DEBIAN'), 0o755);
  for (const f of ['control', 'conffiles']) chmodSync(at(`DEBIAN/${f}`), 0o644);

  mkdirSync(values.out, { recursive: true });
  const deb = join(resolve(values.out), `llmgw_${pkg.version}_${arch}.deb`);
  // Owned by root in the archive, whoever builds it.
  execFileSync('dpkg-deb', ['--root-owner-group', `-Z${values.compress}`, '--build', root, deb], { stdio: ['ignore', 'ignore', 'inherit'] });
  const mb = (statSync(deb).size / 1024 / 1024).toFixed(1);
  process.stdout.write(`${deb}\n`);
  process.stderr.write(`llmgw ${pkg.version} for ${arch}: ${mb} MB (${(installedKb / 1024).toFixed(0)} MB installed), Node ${process.version} inside\n`);
} finally {
  rmSync(stage, { recursive: true, force: true });
}
