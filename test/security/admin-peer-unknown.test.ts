import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, describe, expect, it, onTestFinished } from 'vitest';
import { agentConfigYaml, agentDirs } from '../helpers/agent-process.js';
import { until } from '../helpers/engine-processes.js';
import { BIN, runCli } from '../helpers/run-cli.js';
import { expectAgentUnharmed } from './agent-unharmed.js';

/*
 * Review 2, N8 (fail-open half): the per-user cap on admin connections
 * rests on the kernel's SO_PEERCRED, read through koffi. Where it cannot be
 * read, every connection was let in under no uid, so the cap was silently
 * off. Here the failure is real, not a switch in the agent: the agent runs
 * under a seccomp filter that makes the kernel refuse
 * getsockopt(SOL_SOCKET, SO_PEERCRED) with EPERM, and nothing else (koffi,
 * libc, flock, pidfd, netlink all still work).
 */

/**
 * Installs that filter (no_new_privs, then seccomp mode 2) and execs
 * argv[1..]: the agent keeps the pid, and the filter holds for it and for
 * every process it starts. x86_64 and aarch64.
 */
const DENY_PEERCRED = `
import ctypes, os, platform, struct, sys
arch, nr = {'x86_64': (0xC000003E, 55), 'aarch64': (0xC00000B7, 209)}[platform.machine()]
LD, JEQ, RET = 0x20, 0x15, 0x06
# seccomp_data: nr at 0, arch at 4, args[i] at 16 + 8 * i (the low word first).
prog = [(LD, 0, 0, 4), (JEQ, 0, 7, arch), (LD, 0, 0, 0), (JEQ, 0, 5, nr),
        (LD, 0, 0, 24), (JEQ, 0, 3, 1), (LD, 0, 0, 32), (JEQ, 0, 1, 17),
        (RET, 0, 0, 0x00050001), (RET, 0, 0, 0x7FFF0000)]
code = ctypes.create_string_buffer(b''.join(struct.pack('HBBI', *i) for i in prog))
class Fprog(ctypes.Structure):
    _fields_ = [('len', ctypes.c_ushort), ('filter', ctypes.c_void_p)]
fprog = Fprog(len(prog), ctypes.addressof(code))
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
if libc.prctl(38, 1, None, 0, 0) != 0 or libc.prctl(22, 2, ctypes.addressof(fprog), 0, 0) != 0:
    sys.exit('cannot install the seccomp filter: errno %d' % ctypes.get_errno())
os.execv(sys.argv[1], sys.argv[1:])
`;

const hasPython = spawnSync('python3', ['-c', 'import ctypes'], { stdio: 'ignore' }).status === 0;
const REFUSAL_LOG = "refusing every admin connection: the kernel's peer credentials (SO_PEERCRED) cannot be read, and without them no per-user limit holds";
const root = mkdtempSync(join(tmpdir(), 'llmgw-sec-peer-unknown-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** The real `llmgw agent run`, under the filter when `denyPeerCred`; its JSON log records as they come. */
function startAgent(name: string, denyPeerCred: boolean) {
  const dirs = agentDirs(join(root, name));
  mkdirSync(dirs.root, { recursive: true });
  const configPath = join(dirs.root, 'agent.yaml');
  writeFileSync(configPath, agentConfigYaml({ server: 'http://127.0.0.1:1', dirs, nodeId: name }));
  const agentArgv = [process.execPath, BIN, 'agent', 'run', '--config', configPath];
  const [file, ...args] = denyPeerCred ? ['python3', '-c', DENY_PEERCRED, ...agentArgv] : agentArgv;
  const child = execa(file as string, args, { reject: false, stdin: 'ignore', env: { LLMGW_FAKE_GPUS: 'hgx-h100x8' }, buffer: false });
  onTestFinished(async () => {
    child.kill('SIGKILL');
    await child;
  });
  const records: Record<string, unknown>[] = [];
  let partial = '';
  child.stderr?.on('data', (b: Buffer) => {
    const lines = (partial + b.toString()).split('\n');
    partial = lines.pop() ?? '';
    for (const line of lines) {
      try {
        records.push(JSON.parse(line));
      } catch {
        records.push({ msg: line });
      }
    }
  });
  return { dirs, pid: child.pid as number, records };
}

/** Opens `n` raw connections to the socket and resolves once the agent has closed every one. */
function connectAndWaitClosed(socket: string, n: number): Promise<void> {
  return Promise.all(
    Array.from({ length: n }, () => new Promise<void>((resolve) => connect(socket).on('error', () => {}).on('close', () => resolve()).resume())),
  ).then(() => {});
}

describe.skipIf(process.geteuid?.() !== 0 || !hasPython)('admin connections whose peer the kernel will not name (review 2, N8)', () => {
  it('refuses them all, root\'s ctl status included, says why to ctl and once in the log, and the agent is unharmed', { timeout: 30_000 }, async () => {
    const agent = startAgent('denied', true);
    await until(() => existsSync(agent.dirs.socket), 'the admin socket');

    const refusal =
      'the agent refused the connection: it cannot read which user connected (getsockopt(SO_PEERCRED) failed with errno 1), so it lets no one in rather than run without its per-user limits';
    const r = await runCli(['ctl', 'status', '--socket', agent.dirs.socket]);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain(refusal);
    expect(r.exitCode, r.stderr).toBe(77);

    // Many more: each is closed, and the log still has the one line.
    await connectAndWaitClosed(agent.dirs.socket, 50);
    const json = await runCli(['ctl', 'status', '--socket', agent.dirs.socket, '--json']);
    expect(JSON.parse(json.stdout).error).toMatchObject({ kind: 'permission', message: expect.stringContaining(refusal), exitCode: 77 });
    const said = agent.records.filter((rec) => rec.msg === REFUSAL_LOG);
    expect(said).toHaveLength(1);
    // 50: pino's error.
    expect(said[0]).toMatchObject({ level: 'error', why: expect.stringContaining('getsockopt(SO_PEERCRED) failed with errno 1') });
    expectAgentUnharmed(agent.pid);
  });

  it('lets root\'s ctl status in where the credentials are read (the same agent, no filter)', { timeout: 30_000 }, async () => {
    const agent = startAgent('readable', false);
    await until(() => existsSync(agent.dirs.socket), 'the admin socket');
    const r = await runCli(['ctl', 'status', '--socket', agent.dirs.socket, '--json']);
    expect(r.exitCode, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout).nodeId).toBe('readable');
    expect(agent.records.filter((rec) => rec.msg === REFUSAL_LOG)).toHaveLength(0);
  });
});
