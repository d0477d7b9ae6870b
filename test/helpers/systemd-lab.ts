import { existsSync, readdirSync, readFileSync, rmdirSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { execa, type Result } from 'execa';
import { BIN, REPO_ROOT } from './run-cli.js';

/*
 * A throwaway systemd as PID 1 of its own namespaces (test/helpers/systemd-lab-boot.sh says how,
 * and why each of its safety rules exists), for tests of the agent's unit under a real service
 * manager. Every lab booted is recorded, so stopAllLabs() in an afterAll ends it even when a test
 * failed before its own teardown ran.
 */

const BOOT = join(REPO_ROOT, 'test/helpers/systemd-lab-boot.sh');
const CGROUP_ROOT = '/sys/fs/cgroup';
/** The cgroup hierarchies a lab gets a subtree in (hybrid or unified hosts). */
const HIERARCHIES = ['systemd', 'unified'];
const LAB_CGROUP_PREFIX = 'llmgw-sd-';

export interface SystemdLab {
  /** The host pid of the lab's systemd (its PID 1). */
  pid: number;
  /** Runs argv inside the lab (its mount and pid namespaces); never rejects. */
  run(argv: string[], opts?: { timeoutMs?: number }): Promise<Result>;
  /** `systemctl show -p NAME --value UNIT` inside the lab. */
  show(unit: string, property: string): Promise<string>;
  /** Waits until `systemctl show` of the property satisfies pred; throws with the last value after timeoutMs. */
  waitShow(unit: string, property: string, pred: (v: string) => boolean, timeoutMs: number): Promise<string>;
  stop(): Promise<void>;
}

const booted = new Set<SystemdLab>();
/** Every lab this process booted, by PID 1 and top cgroup: what leftovers() checks, and only that (other suites may run labs of their own). */
const everBooted: { pid: number; cgroup: string | undefined }[] = [];

let availability: Promise<string | undefined> | undefined;

/**
 * Why a lab cannot boot on this machine (not root, no systemd binary, no namespaces), or
 * undefined when it can; checked by booting one, because only that proves namespaces work.
 * Once per process: test files that share a worker (isolate: false) boot that lab once.
 */
export function labUnavailableReason(): Promise<string | undefined> {
  availability ??= checkLab();
  return availability;
}

async function checkLab(): Promise<string | undefined> {
  if (process.getuid?.() !== 0) return 'the systemd lab needs root (namespaces, mounts)';
  if (!existsSync('/lib/systemd/systemd')) return 'the systemd lab needs /lib/systemd/systemd (apt-get install systemd)';
  try {
    const lab = await bootLab();
    await lab.stop();
    return undefined;
  } catch (err) {
    return `the systemd lab cannot boot here: ${err instanceof Error ? err.message : String(err)}`;
  }
}

/** `logFile`: where the boot's own output goes (why a lab did not come up). */
export async function bootLab(opts: { logFile?: string } = {}): Promise<SystemdLab> {
  const env = opts.logFile ? { SYSTEMD_LAB_LOG: opts.logFile } : {};
  const r = await execa(BOOT, [], { reject: false, timeout: 30_000, stdin: 'ignore', env });
  const pid = Number(String(r.stdout).trim());
  if (r.exitCode !== 0 || !Number.isInteger(pid) || pid <= 1) {
    throw new Error(String(r.stderr).trim() || `systemd-lab-boot.sh exited ${r.exitCode}`);
  }
  const cgroup = labCgroupOf(pid);
  // unshare, which forked PID 1 and waits for it: it ends right after, and is part of the lab too.
  const parent = parentOf(pid);
  everBooted.push({ pid, cgroup });
  const run = (argv: string[], opts: { timeoutMs?: number } = {}) =>
    execa('nsenter', ['-t', String(pid), '-m', '-p', '--', ...argv], {
      reject: false,
      timeout: opts.timeoutMs ?? 30_000,
      stdin: 'ignore',
    });
  const show = async (unit: string, property: string) =>
    String((await run(['systemctl', 'show', '-p', property, '--value', unit])).stdout).trim();
  const lab: SystemdLab = {
    pid,
    run,
    show,
    async waitShow(unit, property, pred, timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const v = await show(unit, property);
        if (pred(v)) return v;
        if (Date.now() > deadline) throw new Error(`${unit} ${property} is still ${JSON.stringify(v)} after ${timeoutMs} ms`);
        await sleep(100);
      }
    },
    async stop() {
      booted.delete(lab);
      await killLab(pid, cgroup);
      for (let i = 0; i < 100 && parent !== undefined && alive(parent); i++) await sleep(50);
    },
  };
  booted.add(lab);
  return lab;
}

/** Ends every lab still running; for afterAll, so a failed test leaves none behind. */
export async function stopAllLabs(): Promise<void> {
  await Promise.all([...booted].map((lab) => lab.stop()));
}

/** What is left of the labs this process booted, one line each: a suite must leave none. */
export function labLeftovers(): string[] {
  const out: string[] = [];
  for (const { pid, cgroup } of everBooted) {
    if (alive(pid)) out.push(`systemd ${pid} still running`);
    for (const h of HIERARCHIES) {
      const dir = cgroup && join(CGROUP_ROOT, h, cgroup);
      if (dir && existsSync(dir)) out.push(`cgroup ${dir} still there`);
    }
  }
  return out;
}

/** The lab's top cgroup, read from its PID 1, so teardown removes exactly that subtree. */
function labCgroupOf(pid: number): string | undefined {
  try {
    for (const line of readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n')) {
      const path = line.split(':')[2] ?? '';
      const top = path.split('/')[1] ?? '';
      if (top.startsWith(LAB_CGROUP_PREFIX)) return top;
    }
  } catch {
    // Already gone: nothing of it left to find.
  }
  return undefined;
}

async function killLab(pid: number, cgroup: string | undefined): Promise<void> {
  // Its PID 1 dies and with it the whole pid namespace: the agent, its engines, any transient unit.
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // Already dead.
  }
  for (let i = 0; i < 100 && alive(pid); i++) await sleep(50);
  if (!cgroup) return;
  for (const h of HIERARCHIES) {
    const dir = join(CGROUP_ROOT, h, cgroup);
    // A cgroup can be removed once its last process is reaped, which may lag the kill a little.
    for (let i = 0; i < 50 && existsSync(dir); i++) {
      removeCgroupTree(dir);
      if (existsSync(dir)) await sleep(50);
    }
  }
}

function removeCgroupTree(dir: string): void {
  try {
    for (const e of readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) removeCgroupTree(join(dir, e.name));
    rmdirSync(dir);
  } catch {
    // Still busy (a process not yet reaped) or already gone: the caller retries.
  }
}

function parentOf(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  } catch {
    return undefined;
  }
}

function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    return state !== 'Z' && state !== 'X';
  } catch {
    return false;
  }
}

/** The agent's unit, as docs/install.md's production steps install it. */
export const AGENT_UNIT = 'llmgw-agent.service';

/** Short stop timers for a test, and the agent's output kept in `logFile` for a failing test to show. */
export const agentLogDropIn = (logFile: string) =>
  ['[Service]', 'RestartSec=500ms', 'TimeoutStartSec=30s', 'TimeoutStopSec=5s', `StandardOutput=append:${logFile}`, `StandardError=append:${logFile}`, ''].join('\n');

/**
 * Installs the agent's unit in `lab` as docs/install.md's production steps do
 * (`llmgw agent install-unit --config`), adds `dropIn` beside it as an
 * operator would (so the shipped unit keeps its production values), and
 * reloads systemd. Both results are returned for the caller to assert on.
 */
export async function installAgentUnit(lab: SystemdLab, opts: { configPath: string; dropIn: string; dropInName?: string }): Promise<{ installed: Result; reloaded: Result }> {
  const installed = await lab.run([process.execPath, BIN, 'agent', 'install-unit', '--config', opts.configPath, '--output', `/run/systemd/system/${AGENT_UNIT}`]);
  // The lab's /run is its own; the host reaches it through the lab's root.
  const dropInDir = `/proc/${lab.pid}/root/run/systemd/system/${AGENT_UNIT}.d`;
  await mkdir(dropInDir, { recursive: true });
  await writeFile(join(dropInDir, opts.dropInName ?? 'test.conf'), opts.dropIn);
  const reloaded = await lab.run(['systemctl', 'daemon-reload']);
  return { installed, reloaded };
}
