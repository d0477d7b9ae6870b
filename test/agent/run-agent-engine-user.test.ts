import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, sep } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { describe, expect, it, onTestFinished } from 'vitest';
import { type AgentMessage, ShardState, type ShardStatus, StopShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { agentDirs, cleanUpEnginesAfterTest, startAgentProcess } from '../helpers/agent-process.js';
import { freePort, isRunning, processesWritingUnder, until } from '../helpers/engine-processes.js';
import { REPO_ROOT } from '../helpers/run-cli.js';
import { isRegister, shardIs, simStart } from '../helpers/sim-shards.js';
import { startControlPlane } from '../helpers/start-control-plane.js';
import { shardLogPath } from '../../src/lib/shard-layout.js';

const statusOf = (m: AgentMessage) => m.msg.value as ShardStatus;

/** A field of /proc/<pid>/status ("Uid", "Gid", "Groups"), as the kernel wrote it. */
function procStatus(pid: number, field: string): string {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith(`${field}:`));
  if (line === undefined) throw new Error(`no ${field} in /proc/${pid}/status`);
  return line.slice(field.length + 1).trim();
}

const environOf = (pid: number) => readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');

/**
 * The top-level node_modules entries (`chalk`, `@oclif/core`) that the
 * package's production dependencies need, transitively, resolved as Node
 * resolves them (nested node_modules first, then up to the checkout's): what
 * `llmgw sim engine` may load, and nothing of the dev tooling.
 */
function productionPackages(): string[] {
  const modules = join(REPO_ROOT, 'node_modules');
  const top = new Set<string>();
  const seen = new Set<string>();
  const resolveFrom = (name: string, from: string): string | undefined => {
    for (let d = from; ; d = dirname(d)) {
      const candidate = join(d, 'node_modules', name);
      if (existsSync(join(candidate, 'package.json'))) return candidate;
      if (d === REPO_ROOT || d === dirname(d)) return undefined;
    }
  };
  const visit = (dir: string) => {
    if (seen.has(dir)) return;
    seen.add(dir);
    const parts = relative(modules, dir).split(sep);
    top.add(parts[0]?.startsWith('@') ? `${parts[0]}/${parts[1]}` : (parts[0] as string));
    const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as Record<string, Record<string, string> | undefined>;
    for (const name of Object.keys({ ...pkg.dependencies, ...pkg.optionalDependencies })) {
      const found = resolveFrom(name, dir);
      if (found) visit(found);
    }
  };
  const own = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
  for (const name of Object.keys(own.dependencies)) {
    const found = resolveFrom(name, REPO_ROOT);
    if (!found) throw new Error(`dependency ${name} is not installed: run npm ci`);
    visit(found);
  }
  return [...top];
}

/**
 * A copy of the CLI that nobody can read and run, wherever the checkout is:
 * under /root (0700, as CI's clone may be) nobody cannot even reach
 * bin/run.js, and the engine would die with "Cannot find module". bin/,
 * dist/, package.json, the manifest and the production dependencies (about
 * 30 MB, symlinks followed), every directory open to all, nothing writable.
 */
function copyCliForNobody(): string {
  const root = mkdtempSync(join(tmpdir(), 'llmgw-cli-nobody-'));
  for (const part of ['bin', 'dist', 'package.json', 'oclif.manifest.json']) {
    if (existsSync(join(REPO_ROOT, part))) cpSync(join(REPO_ROOT, part), join(root, part), { recursive: true, dereference: true });
  }
  for (const name of productionPackages()) {
    cpSync(join(REPO_ROOT, 'node_modules', name), join(root, 'node_modules', name), { recursive: true, dereference: true });
  }
  execFileSync('chmod', ['-R', 'a+rX,go-w', root]);
  const bin = join(root, 'bin', 'run.js');
  // A TMPDIR that nobody cannot traverse would fail the test later, and obscurely.
  if (spawnSync('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', 'test', '-r', bin]).status !== 0) {
    throw new Error(`nobody cannot read ${bin}: set TMPDIR to a directory every user can traverse`);
  }
  return root;
}

describe.skipIf(process.geteuid?.() !== 0)('engines.<name>.user (run as root)', () => {
  it('runs the engine as nobody with no supplementary group and its HOME, logs it, adopts it after kill -9 and stops it', async () => {
    const { cp, url } = await startControlPlane();
    const dirs = agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-user-')));
    cleanUpEnginesAfterTest(dirs);
    const cli = copyCliForNobody();
    onTestFinished(() => rmSync(cli, { recursive: true, force: true }));
    // The engine runs the copy; the agent still runs from the checkout, as root.
    const command = JSON.stringify([process.execPath, join(cli, 'bin', 'run.js'), 'sim', 'engine']);
    const extraYaml = `engines:\n  sim:\n    user: nobody\n    command: ${command}\n`;
    const first = startAgentProcess({ server: url, dirs, extraYaml });
    await cp.waitFor('node-a', isRegister, 20_000);

    const port = await freePort();
    const ready = cp.waitFor('node-a', shardIs('s1', ShardState.READY), 30_000);
    cp.send('node-a', { case: 'start', value: simStart('s1', port) });
    const pid = statusOf(await ready).pid;

    // Real, effective, saved and filesystem uid all nobody's: nothing of root is left to regain.
    expect(procStatus(pid, 'Uid').split(/\s+/)).toEqual(['65534', '65534', '65534', '65534']);
    expect(procStatus(pid, 'Gid').split(/\s+/)).toEqual(['65534', '65534', '65534', '65534']);
    expect(procStatus(pid, 'Groups')).toBe('');
    const env = environOf(pid);
    expect(env).toContain('HOME=/nonexistent');
    expect(env).toContain('USER=nobody');
    // The log fd was opened by root and inherited: the engine's output is there, the file root's.
    const logPath = shardLogPath(dirs.logDir, 's1');
    await until(() => readFileSync(logPath, 'utf8').length > 0, 'the engine writing its log');
    expect(statSync(logPath).uid).toBe(0);

    // Adoption: the new agent must count a nobody-owned writer of the log as the engine.
    first.kill('SIGKILL');
    await first.exited;
    expect(isRunning(pid)).toBe(true);
    const reRegistered = cp.waitFor('node-a', isRegister, 20_000);
    const second = startAgentProcess({ server: url, dirs, extraYaml });
    const reg = (await reRegistered).msg.value as { runningShards: { shardId: string; pid: number }[] };
    expect(reg.runningShards.map((s) => [s.shardId, s.pid])).toEqual([['s1', pid]]);
    expect(processesWritingUnder(dirs.logDir)).toEqual([pid]);

    const stopped = cp.waitFor('node-a', shardIs('s1', ShardState.STOPPED), 20_000);
    cp.send('node-a', { case: 'stop', value: create(StopShardSchema, { shardId: 's1' }) });
    await stopped;
    await until(() => !isRunning(pid), 'the engine gone after the stop');
    expect(processesWritingUnder(dirs.logDir)).toEqual([]);
    await second.stop();
  });
});
