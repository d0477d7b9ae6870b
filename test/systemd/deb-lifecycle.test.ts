import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ShardInfoJson, StatusResponseJson } from '../../src/gen/llmgw/v1/admin_pb.js';
import { type Register, ShardState, type ShardStatus } from '../../src/gen/llmgw/v1/agent_pb.js';
import { endLabFile } from '../helpers/end-lab-file.js';
import { suiteDeb } from '../helpers/suite-deb.js';
import { freePort } from '../helpers/engine-processes.js';
import { isRegister, shardIs, simStart } from '../helpers/sim-shards.js';
import { type StartedControlPlane, startControlPlane } from '../helpers/start-control-plane.js';
import { AGENT_UNIT, agentLogDropIn, bootLab, labUnavailableReason, type SystemdLab } from '../helpers/systemd-lab.js';
import { watchHealth } from '../helpers/watch-health.js';

/*
 * The .deb's whole life under a real systemd (the lab's, test/helpers/systemd-lab-boot.sh), as
 * new-operator walkthrough 4 lived it (issue 49 item 4, O5): install, the agent and two engines
 * on the package's fake-GPU example, an upgrade with the engines serving, a removal that keeps
 * them (and says so), a reinstall that adopts them, and a purge that stops them, naming each,
 * with /var/log/llmgw and /var/lib/llmgw separate mounts (the purge failed on a mounted log
 * folder and orphaned the engines). dpkg runs inside the lab, on a copy of the host's dpkg
 * database, with /etc and /usr overlays of the lab's own: nothing of the host's changes.
 */

const NODE = 'node-deb';
const S = ShardState;
const unitOf = (id: string) => `llmgw-shard-${id}.service`;
const unavailable = await labUnavailableReason();

interface Fixture {
  lab: SystemdLab;
  cp: StartedControlPlane;
  root: string;
  deb: string;
}
let f: Fixture;
const engines = new Map<string, { pid: number; port: number }>();

function later<T>(p: Promise<T>): Promise<T> {
  p.catch(() => {});
  return p;
}

/** argv inside the lab; exit code and output, never a rejection. */
async function inLab(argv: string[], timeoutMs = 60_000): Promise<{ exitCode: number; stdout: string; stderr: string }> {
  const r = await f.lab.run(argv, { timeoutMs });
  return { exitCode: r.exitCode ?? -1, stdout: String(r.stdout), stderr: String(r.stderr) };
}

const sh = (script: string, timeoutMs?: number) => inLab(['sh', '-c', script], timeoutMs);
const dpkg = (...args: string[]) => inLab(['env', 'DEBIAN_FRONTEND=noninteractive', 'dpkg', ...args], 180_000);
/** A path inside the lab's mount namespace (its overlays and tmpfs), from the host. */
const labPath = (p: string) => `/proc/${f.lab.pid}/root${p}`;

function agentLog(): string {
  return existsSync(join(f.root, 'agent.log')) ? readFileSync(join(f.root, 'agent.log'), 'utf8').split('\n').slice(-30).join('\n') : '';
}

async function ctlShards(): Promise<ShardInfoJson[]> {
  const r = await inLab(['/usr/bin/llmgw', 'ctl', 'status', '--json']);
  expect(r.exitCode, r.stderr).toBe(0);
  return (JSON.parse(r.stdout) as StatusResponseJson).shards ?? [];
}

async function alive(pid: number): Promise<boolean> {
  return (await inLab(['kill', '-0', String(pid)])).exitCode === 0;
}

async function startAgent(): Promise<Register> {
  const registered = later(f.cp.cp.waitFor(NODE, isRegister, 60_000));
  const r = await inLab(['systemctl', 'start', AGENT_UNIT]);
  expect(r.exitCode, `${r.stderr}\n${agentLog()}`).toBe(0);
  return (await registered).msg.value as Register;
}

/** A READY (or FAILED) wait for each engine, set up before the restart that makes one. */
function readyWaits(): Map<string, Promise<unknown>> {
  return new Map([...engines.keys()].map((id) => [id, later(f.cp.cp.waitFor(NODE, shardIs(id, S.READY, S.FAILED), 90_000))]));
}

/** The pids of both engines as the (new) agent reports them, once each is READY again (in Register, or in a status after it). */
async function readyPids(reg: Register, waits: Map<string, Promise<unknown>>): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const id of engines.keys()) {
    const listed = reg.runningShards.find((s) => s.shardId === id);
    expect(listed, `Register lacks ${id}\n${agentLog()}`).toBeDefined();
    if (listed?.state !== S.READY) {
      const st = ((await waits.get(id)) as { msg: { value: ShardStatus } }).msg.value;
      expect(S[st.state], st.error).toBe('READY');
    }
    out[id] = (await ctlShards()).find((s) => s.shardId === id)?.pid ?? 0;
  }
  return out;
}

describe.skipIf(unavailable !== undefined)(
  unavailable ? `the .deb under a real systemd (skipped: ${unavailable})` : 'the .deb under a real systemd: install, upgrade, remove, reinstall, purge, with engines running and mounted log and state folders',
  { timeout: 240_000 },
  () => {
    beforeAll(async () => {
      // Built once for the run's files that need a .deb (test/helpers/suite-deb.ts), before this file's folder exists.
      const built = await suiteDeb();
      if (built.exitCode !== 0) throw new Error(`npm run package's script failed: ${built.stderr}`);
      const root = mkdtempSync(join(tmpdir(), 'llmgw-sddeb-'));
      const lab = await bootLab({ logFile: join(root, 'systemd-lab-boot.log') }).catch((err: unknown) => {
        rmSync(root, { recursive: true, force: true });
        throw err;
      });
      const cp = await startControlPlane();
      f = { lab, cp, root, deb: built.deb as string };
      // The lab's own /etc and /usr (overlays on the host's), the host's dpkg database copied into
      // its private /var/lib, and the log and state folders as separate mounts.
      await execa('cp', ['-a', '/var/lib/dpkg', labPath('/var/lib/')]);
      const prepared = await sh(
        [
          'set -e',
          'for d in etc usr; do mkdir -p /run/deblab/$d/upper /run/deblab/$d/work; mount -t overlay overlay -o lowerdir=/$d,upperdir=/run/deblab/$d/upper,workdir=/run/deblab/$d/work /$d; done',
          // The image's Docker policy (exit 101: no service is started or restarted by a package) is no node's.
          'rm -f /usr/sbin/policy-rc.d',
          'mkdir -p /var/log/llmgw /var/lib/llmgw',
          // 2 GiB caps (tmpfs takes memory only as it fills): the agent's disk-pressure floor is 1 GiB free.
          'mount -t tmpfs -o size=2g,mode=0750 llmgw-log /var/log/llmgw',
          'mount -t tmpfs -o size=2g,mode=0700 llmgw-state /var/lib/llmgw',
          // A host that had llmgw installed: the lab starts without it (its overlays only).
          'if dpkg -s llmgw >/dev/null 2>&1; then dpkg --purge llmgw >/dev/null; fi',
        ].join('\n'),
      );
      expect(prepared.exitCode, prepared.stderr).toBe(0);
    }, 360_000);

    afterAll(() => endLabFile(f));

    it("installs: the accounts, the conffile root:llmgw-ops 0640, Debian's doc files; nothing starts; fake-vllm runs on the package's Node with no node on PATH; discover --strict passes on the fake-GPU example (and fails on the default fake box)", async () => {
      const installed = await dpkg('-i', f.deb);
      expect(installed.exitCode, installed.stderr).toBe(0);
      expect((await inLab(['getent', 'passwd', 'llmgw-engine'])).exitCode).toBe(0);
      expect((await inLab(['getent', 'group', 'llmgw-ops'])).exitCode).toBe(0);
      expect((await inLab(['stat', '-c', '%a %U %G', '/etc/llmgw/agent.yaml'])).stdout.trim()).toBe('640 root llmgw-ops');
      expect(readFileSync(labPath('/usr/share/doc/llmgw/copyright'), 'utf8')).toMatch(/^Format: https:\/\/www\.debian\.org\/doc\/packaging-manuals\/copyright-format\/1\.0\/$/m);
      expect((await sh('zcat /usr/share/doc/llmgw/changelog.gz | head -1')).stdout).toMatch(/^llmgw \(\d+\.\d+\.\d+\) unstable; urgency=medium$/m);

      // The double's own usage error, from its JavaScript: a Node ran it (sh would say "node: not found", 127).
      const vllm = await inLab(['env', '-i', 'PATH=/nonexistent', '/usr/lib/llmgw/bin/fake-vllm', 'serve', '--no-such-flag']);
      expect(vllm.stderr).toContain('unrecognized arguments: --no-such-flag');
      expect(vllm.exitCode).toBe(2);

      // The operator's steps from the example's header, with this lab's unit path for /etc/systemd/system.
      const example = readFileSync(labPath('/usr/share/doc/llmgw/examples/fake-gpus/agent.yaml'), 'utf8');
      writeFileSync(labPath('/etc/llmgw/agent.yaml'), example.replace(/^node_id: ""$/m, `node_id: ${NODE}`).replace(/^server: .*$/m, `server: ${f.cp.url}`));
      const dropIns = labPath(`/run/systemd/system/${AGENT_UNIT}.d`);
      mkdirSync(dropIns, { recursive: true });
      copyFileSync(labPath('/usr/share/doc/llmgw/examples/fake-gpus/fake-gpus.conf'), join(dropIns, 'fake-gpus.conf'));
      writeFileSync(join(dropIns, 'test.conf'), agentLogDropIn(join(f.root, 'agent.log')));
      expect((await inLab(['ln', '-s', `/lib/systemd/system/${AGENT_UNIT}`, `/run/systemd/system/${AGENT_UNIT}`])).exitCode).toBe(0);
      expect((await inLab(['systemctl', 'daemon-reload'])).exitCode).toBe(0);
      expect(await f.lab.show(AGENT_UNIT, 'ActiveState')).toBe('inactive');

      const dataset = (await sh(`systemctl show -p Environment --value ${AGENT_UNIT}`)).stdout.match(/LLMGW_FAKE_GPUS=(\S+)/)?.[1];
      expect(dataset).toBe('pcie-l40sx4');
      const strict = await inLab(['env', `LLMGW_FAKE_GPUS=${dataset}`, '/usr/bin/llmgw', 'discover', '--config', '/etc/llmgw/agent.yaml', '--strict']);
      expect(strict.exitCode, `${strict.stdout}\n${strict.stderr}`).toBe(0);
      const defaultBox = await inLab(['/usr/bin/llmgw', 'discover', '--config', '/etc/llmgw/agent.yaml', '--strict']);
      expect(defaultBox.exitCode).toBe(1);
      expect(defaultBox.stdout + defaultBox.stderr).toMatch(/FAIL\s+foreign-memory/);
    });

    it('runs under systemd on the packaged runtime, with two sim engines in their own units as llmgw-engine', async () => {
      await startAgent();
      expect(await f.lab.show(AGENT_UNIT, 'ExecMainStatus')).toBe('0');
      const mainPid = await f.lab.show(AGENT_UNIT, 'MainPID');
      expect((await inLab(['readlink', `/proc/${mainPid}/exe`])).stdout.trim()).toBe('/usr/lib/llmgw/node/bin/node');
      for (const [id, gpu] of [['d1', 0], ['d2', 2]] as const) {
        const port = await freePort();
        const ready = later(f.cp.cp.waitFor(NODE, shardIs(id, S.READY, S.FAILED, S.EXITED), 60_000));
        f.cp.cp.send(NODE, { case: 'start', value: simStart(id, port, { gpu }) });
        const st = (await ready).msg.value as ShardStatus;
        expect(S[st.state], `${st.error}\n${agentLog()}`).toBe('READY');
        engines.set(id, { pid: st.pid, port });
        expect(await f.lab.show(unitOf(id), 'User')).toBe((await inLab(['id', '-u', 'llmgw-engine'])).stdout.trim());
      }
    });

    it('upgrades with the engines serving: dpkg -i again restarts the agent, which adopts both (same pids), every health check answered, the edited conffile kept', async () => {
      const before = await f.lab.show(AGENT_UNIT, 'MainPID');
      const health = [...engines.values()].map((e) => watchHealth(e.port));
      const registered = later(f.cp.cp.waitFor(NODE, isRegister, 90_000));
      const waits = readyWaits();
      const upgraded = await dpkg('-i', f.deb);
      expect(upgraded.exitCode, upgraded.stderr).toBe(0);
      const pids = await readyPids((await registered).msg.value as Register, waits);
      expect(await f.lab.show(AGENT_UNIT, 'MainPID')).not.toBe(before);
      for (const [id, e] of engines) expect(pids[id], id).toBe(e.pid);
      for (const h of health) {
        const seen = await h.stop();
        expect(seen.bad).toEqual([]);
        expect(seen.ok).toBeGreaterThan(0);
      }
      expect(readFileSync(labPath('/etc/llmgw/agent.yaml'), 'utf8')).toContain(`node_id: ${NODE}`);
    });

    it('remove keeps the engines serving and says so, naming their units; a reinstall starts nothing, and the started agent adopts them', async () => {
      const removed = await dpkg('-r', 'llmgw');
      expect(removed.exitCode, removed.stderr).toBe(0);
      expect(removed.stderr).toContain('its engines keep serving and their state stays in /var/lib/llmgw, so installing llmgw again adopts them');
      expect(removed.stderr).toContain(`engine units still running: ${unitOf('d1')} ${unitOf('d2')}`);
      expect(await f.lab.show(AGENT_UNIT, 'ActiveState')).toBe('inactive');
      for (const e of engines.values()) expect(await alive(e.pid)).toBe(true);
      expect(existsSync(labPath('/var/lib/llmgw/shards/d1.json'))).toBe(true);
      expect(existsSync(labPath('/etc/llmgw/agent.yaml'))).toBe(true);

      const reinstalled = await dpkg('-i', f.deb);
      expect(reinstalled.exitCode, reinstalled.stderr).toBe(0);
      expect(await f.lab.show(AGENT_UNIT, 'ActiveState')).toBe('inactive');
      const waits = readyWaits();
      const pids = await readyPids(await startAgent(), waits);
      for (const [id, e] of engines) expect(pids[id], id).toBe(e.pid);
    });

    it('purge with the engines running and /var/log/llmgw and /var/lib/llmgw mounts: exit 0, the engines stopped and named, each mount emptied and kept with a line saying so, /etc/llmgw gone', async () => {
      expect(readFileSync(labPath(`/var/log/llmgw/shards/d1.log`), 'utf8').length).toBeGreaterThan(0);
      const purged = await dpkg('--purge', 'llmgw');
      expect(purged.exitCode, purged.stderr).toBe(0);
      expect(purged.stderr).toContain(`purge stops the engines still running (nothing could adopt them once their state is gone): ${unitOf('d1')} ${unitOf('d2')}`);
      for (const e of engines.values()) expect(await alive(e.pid)).toBe(false);
      expect(await f.lab.show(unitOf('d1'), 'ActiveState')).toBe('inactive');
      for (const dir of ['/var/log/llmgw', '/var/lib/llmgw']) {
        expect(purged.stderr).toContain(`llmgw: ${dir} is a mount point: emptied and kept`);
        expect((await inLab(['mountpoint', '-q', dir])).exitCode, dir).toBe(0);
        expect((await sh(`find ${dir} -mindepth 1 | wc -l`)).stdout.trim(), dir).toBe('0');
      }
      expect(existsSync(labPath('/etc/llmgw'))).toBe(false);
      expect((await inLab(['dpkg', '-s', 'llmgw'])).exitCode).not.toBe(0);
      // Nothing left running that writes a shard log, and no llmgw unit loaded.
      expect((await sh("systemctl list-units --all --plain --no-legend 'llmgw-*'")).stdout.trim()).toBe('');
    });
  },
);
