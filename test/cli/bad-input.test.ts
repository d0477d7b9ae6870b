import { execa } from 'execa';
import { mkdtempSync, rmSync } from 'node:fs';
import { type Server, type Socket, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { noteWhileWaiting } from '../../src/ctl/note-while-waiting.js';
import { BIN, runCli } from '../helpers/run-cli.js';

/*
 * An operator's bad input, through the real binary: each is one line on
 * stderr naming what is wrong and what to do, with DESIGN.md's exit status
 * (2 usage, 69 agent unreachable), and nothing is asked of an agent.
 */

let dir: string;
/** A socket path where nothing is: a command that gets past its own checks stops here with 69. */
let noAgent: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'llmgw-bad-input-'));
  noAgent = join(dir, 'absent.sock');
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const oneLine = (stderr: string) => expect(stderr.split('\n')).toHaveLength(1);

describe('shard ids on sleep, wake and adapters', () => {
  it.each([
    ['ctl', 'sleep', 'a/b'],
    ['ctl', 'wake', '..'],
    ['ctl', 'adapters', '../x'],
  ])('%s %s %s is refused before the agent is asked (exit 2)', async (...argv) => {
    const r = await runCli([...argv, '--socket', noAgent]);
    expect(r.stderr).toMatch(/^error: invalid shard id ".*": use 1-128 characters of A-Z a-z 0-9 \. _ - starting with a letter or digit$/);
    expect(r.exitCode).toBe(2);
  });

  it('lets a well-formed id through to the agent (here: none, exit 69)', async () => {
    const r = await runCli(['ctl', 'sleep', 'tiny-0-g1-r0', '--socket', noAgent]);
    expect(r.stderr).toMatch(/^error: the agent is not running: no socket on /);
    expect(r.exitCode).toBe(69);
  });
});

describe('durations', () => {
  it('refuses a duration no timer can wait, which Node would fire at once (exit 2)', async () => {
    const r = await runCli(['ctl', 'drain', 'x', '--wait', '--timeout', '1000h', '--socket', noAgent]);
    expect(r.stderr).toBe('error: --timeout "1000h" is longer than a timer can wait; give at most 596h');
    expect(r.exitCode).toBe(2);
  });

  it('takes the longest one a timer can wait', async () => {
    const r = await runCli(['ctl', 'drain', 'x', '--wait', '--timeout', '596h', '--socket', noAgent]);
    expect(r.stderr).toMatch(/^error: the agent is not running/);
    expect(r.exitCode).toBe(69);
  });

  it.each(['sleep', 'wake'])('refuses ctl %s --timeout 0s, a wait that times out before the answer', async (cmd) => {
    const r = await runCli(['ctl', cmd, 'tiny-0-g1-r0', '--timeout', '0s', '--socket', noAgent]);
    expect(r.stderr).toBe('error: --timeout must be more than 0, got "0s"');
    expect(r.exitCode).toBe(2);
  });
});

describe("oclif's usage errors", () => {
  it.each([
    [['ctl', 'status', '--bogus'], 'error: Nonexistent flag: --bogus; see `llmgw ctl status --help`'],
    [['ctl', 'sleep'], 'error: Missing 1 required arg: shard, the shard to put to sleep (llmgw ctl status lists them); see `llmgw ctl sleep --help`'],
    [['ctl', 'drain', 'x', '--cancel', '--deadline', '1m'], 'error: --cancel=true cannot also be provided when using --deadline; see `llmgw ctl drain --help`'],
    [['sim', 'engine', '--bogus'], 'error: Nonexistent flag: --bogus; see `llmgw sim engine --help`'],
  ])('%j is one line, exit 2', async (argv, line) => {
    const r = await runCli(argv);
    expect(r.stderr).toBe(line);
    expect(r.exitCode).toBe(2);
  });

  it('is the same one line in the --json error object', async () => {
    const r = await runCli(['models', 'rm', '--json']);
    expect(r.exitCode).toBe(2);
    oneLine(r.stderr);
    expect(JSON.parse(r.stdout)).toEqual({ error: { kind: 'usage', exitCode: 2, message: r.stderr.replace(/^error: /, '') } });
  });
});

/** A Unix socket served by `answer` for each connection: another program's socket where the agent's should be. */
async function fakeSocket(name: string, answer: (c: Socket) => void): Promise<{ path: string; server: Server }> {
  const path = join(dir, name);
  const server = createServer(answer);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(path, resolve);
  });
  return { path, server };
}

describe('a socket that is not the agent', () => {
  const servers: Server[] = [];
  let webServer: string;
  let closer: string;
  beforeAll(async () => {
    // A web server's 404 page, answered once the request is in (as nginx or a container runtime's API would).
    const web = await fakeSocket('web.sock', (c) => {
      c.on('error', () => {});
      c.once('data', () => c.end('HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 10\r\nConnection: close\r\n\r\nnot found\n'));
    });
    // Closes every connection unread.
    const close = await fakeSocket('closer.sock', (c) => c.destroy());
    servers.push(web.server, close.server);
    webServer = web.path;
    closer = close.path;
  });
  afterAll(async () => {
    await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  });

  it.each([
    [['ctl', 'status'], 'Status'],
    [['ctl', 'cordon', '--reason', 'x'], 'Cordon'],
  ])('%j names the socket and what to do, exit 69 (a unary call, HTTP/1.1)', async (argv, method) => {
    const r = await runCli([...argv, '--socket', webServer]);
    oneLine(r.stderr);
    expect(r.stderr).toContain(`error: what answers on ${webServer} is not an llmgw agent that knows ${method} (HTTP 404 with a body that is not JSON: "not found\\n")`);
    expect(r.stderr).toContain('pass the agent\'s admin socket with --socket / LLMGW_SOCKET');
    expect(r.exitCode).toBe(69);
  });

  it.each([[['ctl', 'events']], [['ctl', 'drain', 'x']], [['ctl', 'logs', 'x', '--log-dir', '/nonexistent']], [['ctl', 'top', '--once']]])(
    '%j names the socket and what to do, exit 69 (a stream, HTTP/2)',
    async (argv) => {
      const r = await runCli([...argv, '--socket', webServer]);
      oneLine(r.stderr);
      expect(r.stderr).toContain(`is not an llmgw agent that knows the streaming calls (it does not speak HTTP/2`);
      expect(r.stderr).toContain(webServer);
      expect(r.exitCode).toBe(69);
    },
  );

  it('says where a stream was cut before any answer, exit 69', async () => {
    const r = await runCli(['ctl', 'events', '--socket', closer]);
    oneLine(r.stderr);
    expect(r.stderr).toBe(
      `error: the connection on ${closer} closed without an answer (http/2 stream closed with error code CANCEL (0x8)): if the agent runs (\`systemctl status llmgw-agent\`), check that this is its admin socket (--socket / LLMGW_SOCKET, admin.socket in the agent config)`,
    );
    expect(r.exitCode).toBe(69);
  });

  it('prints the --json error object as well', async () => {
    const r = await runCli(['ctl', 'status', '--json', '--socket', webServer]);
    expect(r.exitCode).toBe(69);
    expect(JSON.parse(r.stdout).error).toMatchObject({ kind: 'unreachable', exitCode: 69 });
  });
});

describe('ctl sleep and wake say what they wait for', () => {
  it('writes one note on stderr while the agent holds the answer, and the answer alone on stdout', async () => {
    // An agent that holds Sleep's answer until the test has seen the note: no clock decides the outcome.
    let release: (() => void) | undefined;
    const { path, server } = await fakeSocket('slow.sock', (c) => {
      c.on('error', () => {});
      c.once('data', () => {
        release = () => {
          const body = JSON.stringify({ shard: { shardId: 'tiny-0-g1-r0', state: 'SHARD_STATE_SLEEPING' } });
          c.end(`HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
        };
      });
    });
    const child = execa(process.execPath, [BIN, 'ctl', 'sleep', 'tiny-0-g1-r0', '--json', '--socket', path], { reject: false, env: { NO_COLOR: '1' }, timeout: 60_000 });
    try {
      let stderr = '';
      await new Promise<void>((resolve) => {
        // Also on exit: without a note, the assertions below say so instead of the wait lasting until the timeout.
        child.once('exit', () => resolve());
        child.stderr?.on('data', (chunk: Buffer) => {
          stderr += chunk.toString();
          if (stderr.includes('\n') && release) {
            release();
            resolve();
          }
        });
      });
      const r = await child;
      expect(r.exitCode).toBe(0);
      expect(stderr).toBe('waiting for shard tiny-0-g1-r0 to free its GPU memory (at most 5m, --timeout)…\n');
      expect(JSON.parse(String(r.stdout))).toMatchObject({ shard: { state: 'SHARD_STATE_SLEEPING' } });
    } finally {
      release?.();
      child.kill();
      await child;
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('writes nothing for an answer already there', async () => {
    const out = new PassThrough();
    let written = '';
    out.on('data', (c: Buffer) => {
      written += c.toString();
    });
    expect(await noteWhileWaiting(Promise.resolve(7), 'waiting', out, 1000)).toBe(7);
    expect(written).toBe('');
  });
});
