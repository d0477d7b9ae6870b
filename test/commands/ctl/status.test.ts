import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { callUnaryJson } from '../../../src/ctl/call-unary-json.js';
import type { StatusResponseJson } from '../../../src/gen/llmgw/v1/admin_pb.js';
import type { AgentMessage } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { findGroup } from '../../../src/lib/find-group.js';
import { type CtlFixture, NODE_ID, startCtlFixture } from '../../helpers/ctl-fixture.js';
import { until } from '../../helpers/engine-processes.js';
import { type CliResult, REPO_ROOT, runCli } from '../../helpers/run-cli.js';

const ADMIN_GROUP = 'adm';
// Production beats every 5s; 1s keeps the bound (5×) tight and the test honest on a loaded 2-core machine.
const HEARTBEAT_MS = 1000;
const NOBODY = { uid: 65534, gid: 65534 };

let fx: CtlFixture;
let shard: { pid: number; port: number; gpu: number };

beforeAll(async () => {
  fx = await startCtlFixture({ heartbeat: `${HEARTBEAT_MS}ms`, env: { LLMGW_ADMIN_GROUP: ADMIN_GROUP } });
  shard = await fx.startShard('s1');
}, 120_000);
afterAll(() => fx?.close());

/**
 * A copy of the CLI that another user can read: a checkout under /root (mode
 * 0700) is closed to nobody, who would fail with "Cannot find module" (exit
 * 1) instead of reaching the socket. `ctl status --socket` is answered
 * without oclif (bin/run.js's fast path), so bin/, dist/, package.json and
 * the one package its human output loads (chalk) are all it needs.
 */
function copyCliForOtherUsers(): string {
  const root = mkdtempSync(join(tmpdir(), 'llmgw-cli-copy-'));
  for (const part of ['bin', 'dist', 'package.json']) cpSync(join(REPO_ROOT, part), join(root, part), { recursive: true });
  cpSync(join(REPO_ROOT, 'node_modules', 'chalk'), join(root, 'node_modules', 'chalk'), { recursive: true, dereference: true });
  // Every directory open to all, every file readable: what nobody needs, and nothing writable.
  execFileSync('chmod', ['-R', 'a+rX,go-w', root]);
  return root;
}

/** Cells of a table row: columns are separated by two spaces or more. */
const cells = (line: string) => line.trim().split(/\s{2,}/);

/**
 * bin/run.js answers the plain forms of ctl status without loading oclif;
 * `--log-level` is a flag it leaves to oclif, so appending it runs the oclif
 * command with the same meaning.
 */
const VIA_OCLIF = ['--log-level', 'warn'];

/** Both ways of running `args`, for output that must not differ, final newline included. */
async function fastAndOclif(args: string[]): Promise<[CliResult, CliResult]> {
  const exact = { stripFinalNewline: false };
  return [await runCli(args, exact), await runCli([...args, ...VIA_OCLIF], exact)];
}

describe('llmgw ctl status', () => {
  it('prints the node, the control-plane connection, an inventory summary and a table of shards', async () => {
    const r = await runCli(['ctl', 'status', '--socket', fx.socket]);
    expect(r.stderr).toBe('');
    expect(r.exitCode).toBe(0);
    const lines = r.stdout.split('\n');
    expect(lines[0]).toMatch(new RegExp(`^node +${NODE_ID} +\\(llmgw \\d+\\.\\d+\\.\\d+, pid ${fx.agent.pid}, up \\d+s\\)$`));
    expect(lines[1]).toMatch(/^control +connected to http:\/\/127\.0\.0\.1:\d+ \(connect\) since \d{4}-\d\d-\d\dT[\d:.]+Z \(\d+[smh]/);
    expect(lines[2]).toBe('inventory  8 GPUs (8 × NVIDIA H100 80GB HBM3); driver 550.54.15, CUDA 12.4; 4 HCA ports (3 active)');
    const header = lines.findIndex((l) => l.startsWith('SHARD'));
    expect(cells(lines[header] as string)).toEqual(['SHARD', 'REPLICA', 'ENGINE', 'MODEL', 'STATE', 'PID', 'PORT', 'GPUS', 'AGE', 'ADOPTED', 'UNIT']);
    const row = cells(lines[header + 1] as string);
    expect(row.slice(0, 8)).toEqual(['s1', 'r-s1', 'sim', 'sim/m', 'READY', String(shard.pid), String(shard.port), '0']);
    expect(row[8]).toMatch(/^\d+[smh]/);
    expect(row[9]).toBe('no');
    expect(row[10]).toBe('(direct)');
    // The fake box's GPUs 3 and 4 hold memory no process accounts for: what discover fails and the control plane leaves out.
    const gpuRows = new Map(lines.filter((l) => /^\d+ {2,}NVIDIA/.test(l)).map((l) => [cells(l)[0], cells(l)]));
    expect(gpuRows.get('3')?.[3]).toBe('foreign memory 88%');
    expect(gpuRows.get('4')?.[3]).toBe('foreign memory 88%');
    expect(gpuRows.get('0')?.[3]).toBe('ok');
    expect(r.stdout).toMatch(/^GPU 3: foreign memory 88% \(no shard starts on it\): GPU 3: 71480 of 81559 MiB used/m);
  });

  it('--json prints the StatusResponse as proto JSON, zeros and falses included', async () => {
    // In flight and tokens/s are known from the health watch's second /metrics read after READY (-1 until then).
    await until(async () => {
      const res = await callUnaryJson<StatusResponseJson>(fx.socket, 'Status', {});
      return Number(res.shards?.[0]?.tokensPerSecond ?? -1) >= 0;
    }, "s1's token rate read by the agent", 30_000);
    const r = await runCli(['ctl', 'status', '--json', '--socket', fx.socket]);
    expect(r.exitCode).toBe(0);
    const s = JSON.parse(r.stdout) as StatusResponseJson;
    expect(s.nodeId).toBe(NODE_ID);
    expect(s.pid).toBe(fx.agent.pid);
    expect(s.connection).toMatchObject({ state: 'CONNECTION_STATE_CONNECTED', protocol: 'connect', attempt: 0, lastError: '' });
    expect(s.inventory?.gpus).toHaveLength(8);
    expect(s.shards).toEqual([
      {
        shardId: 's1',
        replicaId: 'r-s1',
        engine: 'sim',
        // The sim answers no /version: unknown, '' (sleep-survival.ts refuses what needs it).
        engineVersion: '',
        model: 'sim/m',
        // The store's verified digest of what it serves (issue 51): none for a sim model outside the store.
        modelDigest: '',
        state: 'SHARD_STATE_READY',
        pid: shard.pid,
        httpPort: shard.port,
        gpuIndices: [0],
        startedAt: expect.stringMatching(/Z$/),
        adopted: false,
        error: '',
        exitCode: 0,
        rank: 0,
        nnodes: 1,
        logPath: join(fx.dirs.logDir, 'shards', 's1.log'),
        launcher: 'direct',
        unit: '',
        note: '',
        // An idle sim: nothing in flight, a flat token counter.
        inFlight: 0,
        tokensPerSecond: 0,
        // One node: no gang.
        gang: '',
      },
    ]);
  });

  it('prints the same with and without oclif, as text and as --json', async () => {
    // Times tick between two calls; in the table, ages (42s, 1m3s) and the
    // column widths with them.
    const steady = (s: string) => s.replace(/\d+/g, '#');
    const steadyTable = (s: string) => steady(s.replace(/\b(\d+[smhd])+\b/g, 'AGE')).replace(/ {2,}/g, '  ');
    for (const json of [false, true]) {
      const [fast, oclif] = await fastAndOclif(['ctl', 'status', ...(json ? ['--json'] : []), '--socket', fx.socket]);
      expect(fast.exitCode).toBe(0);
      expect(fast.stdout).toContain(NODE_ID);
      if (json) expect(steady(fast.stdout)).toBe(steady(oclif.stdout));
      else expect(steadyTable(fast.stdout)).toBe(steadyTable(oclif.stdout));
      expect(fast.stderr).toBe(oclif.stderr);
      expect(fast.exitCode).toBe(oclif.exitCode);
    }
  });

  it('finds the socket from LLMGW_SOCKET, and from admin.socket in --config', async () => {
    const byEnv = await runCli(['ctl', 'status', '--json'], { env: { LLMGW_SOCKET: fx.socket } });
    expect(JSON.parse(byEnv.stdout).nodeId).toBe(NODE_ID);
    const byConfig = await runCli(['ctl', 'status', '--json', '--config', fx.agent.configPath]);
    expect(JSON.parse(byConfig.stdout).nodeId).toBe(NODE_ID);
  });

  it("answers docs/day-two.md's buf curl command (a Connect client nobody here wrote) with the node id", async () => {
    const readme = readFileSync(join(REPO_ROOT, 'docs/day-two.md'), 'utf8');
    const line = readme.split('\n').find((l) => l.startsWith('buf curl ') && l.includes('AdminService/Status'));
    expect(line, 'docs/day-two.md has a buf curl line for AdminService/Status').toBeDefined();
    const args = (line as string).split(/\s+/).slice(1).map((a) => (a === '/run/llmgw/agent.sock' ? fx.socket : a));
    expect(args).toContain(fx.socket);
    const r = await execa('npx', ['buf', ...args], { cwd: REPO_ROOT, reject: false, timeout: 60_000 });
    expect(r.stderr).toBe('');
    expect(JSON.parse(r.stdout)).toMatchObject({ nodeId: NODE_ID, shards: [{ shardId: 's1', state: 'SHARD_STATE_READY' }] });
  });

  it('answers 200 concurrent calls (and real ctl processes among them) while heartbeats stay on time', async () => {
    const beats: number[] = [];
    // The agent's CPU time (ms) at each heartbeat: what a loop held by the burst spends between two, whatever the load.
    const cpu: number[] = [];
    const msPerTick = 1000 / Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }));
    const agentCpuMs = () => {
      const f = readFileSync(`/proc/${fx.agent.pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
      return (Number(f[11]) + Number(f[12])) * msPerTick;
    };
    const onMessage = (nodeId: string, m: AgentMessage) => {
      if (nodeId === NODE_ID && m.msg.case === 'heartbeat') {
        beats.push(Date.now());
        cpu.push(agentCpuMs());
      }
    };
    fx.cp.on('message', onMessage);
    onTestFinished(() => {
      fx.cp.off('message', onMessage);
    });
    // A heartbeat before the burst, so the first gap is measured from it.
    await fx.cp.waitFor(NODE_ID, (m) => m.msg.case === 'heartbeat', 10_000);
    const burstStart = Date.now();
    const calls = Array.from({ length: 200 }, () => callUnaryJson<StatusResponseJson>(fx.socket, 'Status', {}, { timeoutMs: 60_000 }));
    const processes = Array.from({ length: 4 }, () => runCli(['ctl', 'status', '--json', '--socket', fx.socket]));
    const results = await Promise.allSettled(calls);
    const cli = await Promise.all(processes);
    const burstEnd = Date.now();
    // One more heartbeat after the burst closes the last gap.
    await fx.cp.waitFor(NODE_ID, (m) => m.msg.case === 'heartbeat', 10_000);

    expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
    expect(results.every((r) => r.status === 'fulfilled' && r.value.nodeId === NODE_ID)).toBe(true);
    expect(cli.map((r) => [r.exitCode, JSON.parse(r.stdout).nodeId])).toEqual(Array(4).fill([0, NODE_ID]));

    const first = beats.findIndex((t) => t >= burstStart - 5 * HEARTBEAT_MS);
    const window = beats.slice(first);
    const gaps = window.slice(1).map((t, i) => t - (window[i] as number));
    const gapCpu = cpu.slice(first).slice(1).map((c, i) => c - (cpu[first + i] as number));
    console.info(`burst of 204 status calls took ${burstEnd - burstStart} ms; heartbeat gaps ${gaps.join(', ')} ms; agent CPU in each ${gapCpu.join(', ')} ms`);
    expect(window.length).toBeGreaterThanOrEqual(2);
    // An agent whose loop the burst holds misses heartbeats for as long as it works on the burst: the
    // CPU it spends between two heartbeats, which no load stretches. Their wall-clock gap is the
    // machine's share of CPU (printed above): 8.4 s with a correct agent at a load average of 15 on
    // 2 cores, past 15 s at 16-20, for 0.3-0.75 s of its CPU; on a quiet machine this bound is the 5 s gap.
    expect(Math.max(...gapCpu)).toBeLessThanOrEqual(5 * HEARTBEAT_MS);
  }, 120_000);

  describe('as nobody, who is not in the admin group', () => {
    const asNobody = { ...NOBODY, env: { HOME: tmpdir() } };
    let cli: string;
    beforeAll(() => {
      cli = copyCliForOtherUsers();
    });
    afterAll(() => rmSync(cli, { recursive: true, force: true }));

    /** The copied CLI run as nobody, as runCli runs the checkout's. */
    const runCliAsNobody = async (args: string[]): Promise<CliResult> => {
      const r = await execa(process.execPath, [join(cli, 'bin', 'run.js'), ...args], { ...asNobody, env: { HOME: tmpdir(), NO_COLOR: '1' }, reject: false, timeout: 60_000, stdin: 'ignore' });
      return { exitCode: r.exitCode ?? -1, stdout: String(r.stdout), stderr: String(r.stderr) };
    };

    it('runs from a copy that nobody can read, wherever the checkout lives', async () => {
      const r = await runCliAsNobody(['--version']);
      expect(r.stderr).toBe('');
      expect(r.exitCode).toBe(0);
    });

    it('is refused by the socket itself (EACCES), while a member of the group gets in', async () => {
      const probe = `require('net').connect(${JSON.stringify(fx.socket)}).on('connect', () => { console.log('connected'); process.exit(0); }).on('error', (e) => { console.log(e.code); process.exit(0); })`;
      const refused = await execa(process.execPath, ['-e', probe], { ...asNobody, reject: false });
      expect(refused.stdout).toBe('EACCES');
      const gid = findGroup({ name: ADMIN_GROUP })?.gid as number;
      const member = await execa(process.execPath, ['-e', probe], { uid: NOBODY.uid, gid, env: { HOME: tmpdir() }, reject: false });
      expect(member.stdout).toBe('connected');
    });

    it('gets exit 77 from ctl status, naming the group to join', async () => {
      const r = await runCliAsNobody(['ctl', 'status', '--socket', fx.socket]);
      expect(r.exitCode).toBe(77);
      expect(r.stderr).toContain(`error: permission denied on the agent's socket ${fx.socket}: join group ${ADMIN_GROUP} (sudo usermod -aG ${ADMIN_GROUP} $USER`);
    });

    it('is told to set admin.group, never to join group root, when the socket is group root', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'llmgw-rootgroup-'));
      chmodSync(dir, 0o755);
      const sock = join(dir, 'agent.sock');
      const server = createServer();
      onTestFinished(() => {
        server.close();
        rmSync(dir, { recursive: true, force: true });
      });
      await new Promise<void>((resolve) => server.listen(sock, resolve));
      chownSync(sock, 0, 0);
      chmodSync(sock, 0o660);
      const r = await runCliAsNobody(['ctl', 'status', '--socket', sock]);
      expect(r.exitCode).toBe(77);
      expect(r.stderr).toContain('set admin.group in the agent config');
      expect(r.stderr).not.toMatch(/group root|-aG root/);
    });
  });
});

describe('llmgw ctl status without an agent', () => {
  it('exits 78 naming a --config file that does not exist, rather than trying the default socket', async () => {
    for (const args of [['--config', '/nonexistent.yaml'], ['--config', '/nonexistent.yaml', '--log-level', 'warn']]) {
      const r = await runCli(['ctl', 'status', ...args]);
      expect(r.exitCode).toBe(78);
      expect(r.stderr).toBe("error: agent config /nonexistent.yaml does not exist; pass the agent's config file with --config (or fix ctl.config with `llmgw config`)");
    }
  });

  it('says a --socket that is a regular file is not a socket', async () => {
    const r = await runCli(['ctl', 'status', '--socket', '/etc/passwd']);
    expect(r.exitCode).toBe(69);
    expect(r.stderr).toContain('error: /etc/passwd is not a socket (it is a regular file)');
  });

  it('exits 69 naming the socket and systemctl status llmgw-agent, with no socket', async () => {
    const missing = join(tmpdir(), 'llmgw-no-such-dir', 'agent.sock');
    const r = await runCli(['ctl', 'status', '--socket', missing]);
    expect(r.exitCode).toBe(69);
    expect(r.stderr).toBe(
      `error: the agent is not running: no socket on ${missing}; check \`systemctl status llmgw-agent\` (or pass --socket / LLMGW_SOCKET if it listens elsewhere)`,
    );
  });

  it('exits 69 when a socket file is left but nothing listens', async () => {
    const root = mkdtempSync(join(tmpdir(), 'llmgw-stale-'));
    onTestFinished(() => rmSync(root, { recursive: true, force: true }));
    const sock = join(root, 'agent.sock');
    await execa(process.execPath, ['-e', `require('net').createServer().listen(${JSON.stringify(sock)}, () => process.kill(process.pid, 'SIGKILL'))`], { reject: false });
    const r = await runCli(['ctl', 'status', '--json', '--socket', sock]);
    expect(r.exitCode).toBe(69);
    expect(r.stderr).toContain(`nothing listens on ${sock}`);
    expect(JSON.parse(r.stdout)).toMatchObject({ error: { kind: 'unreachable', exitCode: 69 } });
  });

  describe('with and without oclif', () => {
    let root: string;
    let missing: string;
    beforeAll(() => {
      root = mkdtempSync(join(tmpdir(), 'llmgw-no-agent-'));
      missing = join(root, 'agent.sock');
    });
    afterAll(() => rmSync(root, { recursive: true, force: true }));

    it('exits 69 with the same line on stderr, and with --json the same error on stdout', async () => {
      for (const json of [false, true]) {
        const [fast, oclif] = await fastAndOclif(['ctl', 'status', ...(json ? ['--json'] : []), '--socket', missing]);
        expect([fast.exitCode, oclif.exitCode]).toEqual([69, 69]);
        expect(fast.stderr).toBe(`error: the agent is not running: no socket on ${missing}; check \`systemctl status llmgw-agent\` (or pass --socket / LLMGW_SOCKET if it listens elsewhere)\n`);
        expect(oclif.stderr).toBe(fast.stderr);
        expect(fast.stdout).toBe(oclif.stdout);
        if (json) expect(JSON.parse(fast.stdout)).toEqual({ error: { kind: 'unreachable', message: expect.stringContaining(missing), exitCode: 69 } });
        else expect(fast.stdout).toBe('');
      }
    });

    it('answers without loading oclif at all, which --log-level still loads', async () => {
      // On exit, @oclif/core (CommonJS) is in the require cache however it was imported.
      const preload = join(root, 'report-oclif.mjs');
      writeFileSync(
        preload,
        [
          "import { createRequire } from 'node:module';",
          'const { cache } = createRequire(import.meta.url);',
          "const loaded = () => Object.keys(cache).some((p) => p.includes('/@oclif/core/'));",
          "process.on('exit', () => process.stderr.write('\\n@oclif/core loaded: ' + loaded() + '\\n'));",
        ].join('\n'),
      );
      const env = { NODE_OPTIONS: `--import=${pathToFileURL(preload).href}` };
      const fast = await runCli(['ctl', 'status', '--socket', missing], { env });
      expect(fast.exitCode).toBe(69);
      expect(fast.stderr).toMatch(/\n@oclif\/core loaded: false$/);
      const oclif = await runCli(['ctl', 'status', '--socket', missing, ...VIA_OCLIF], { env });
      expect(oclif.exitCode).toBe(69);
      expect(oclif.stderr).toMatch(/\n@oclif\/core loaded: true$/);
    });
  });
});
