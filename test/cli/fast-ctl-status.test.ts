import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type MockInstance, afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { fastCtlStatus } from '../../src/cli/fast-ctl-status.js';

let root: string;
let missing: string;
type WriteSpy = MockInstance<typeof process.stdout.write>;
let stdout: WriteSpy;
let stderr: WriteSpy;

beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'llmgw-fast-ctl-'));
  missing = join(root, 'agent.sock');
  stdout = vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
  stderr = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
});
afterEach(() => {
  vi.restoreAllMocks();
  process.exitCode = undefined;
  rmSync(root, { recursive: true, force: true });
});

const written = (spy: WriteSpy) => spy.mock.calls.map((c) => String(c[0])).join('');

describe('fastCtlStatus', () => {
  it.each([
    ['help', ['--help']],
    ['short help', ['-h']],
    ['--log-level', ['--log-level', 'info']],
    ['--log-level=', ['--log-level=info']],
    ['a missing value', ['--socket']],
    ['an empty value', ['--socket=']],
    ['an empty separate value', ['--socket', '']],
    ['a flag where the value should be', ['--socket', '--json']],
    ['a repeated flag', ['--socket', 'a', '--socket', 'b']],
    ['a flag repeated in the other spelling', ['--socket=a', '--socket', 'b']],
    ['a repeated --json', ['--json', '--json']],
    ['a value for --json', ['--json=true']],
    ['an argument', ['extra']],
    ['--', ['--', '--json']],
    ['--config without a value', ['--json', '--config']],
  ])('leaves %s to oclif, doing nothing', async (_, args) => {
    expect(await fastCtlStatus(args, {})).toBe(false);
    expect(stdout).not.toHaveBeenCalled();
    expect(stderr).not.toHaveBeenCalled();
    expect(process.exitCode).toBeUndefined();
  });

  it.each([
    ['LLMGW_CONTENT_TYPE (oclif switches to JSON output)', { LLMGW_CONTENT_TYPE: 'json' }],
    ['a LLMGW_LOG_LEVEL oclif would refuse', { LLMGW_LOG_LEVEL: 'loud' }],
    ['an empty LLMGW_SOCKET', { LLMGW_SOCKET: '' }],
    ['an empty LLMGW_CONFIG', { LLMGW_CONFIG: '' }],
  ])('leaves the command to oclif with %s', async (_, env) => {
    expect(await fastCtlStatus(['--socket', 'x'], env)).toBe(false);
    expect(stdout).not.toHaveBeenCalled();
    expect(stderr).not.toHaveBeenCalled();
    expect(process.exitCode).toBeUndefined();
  });

  it('answers --json, --socket=X and --config X itself, reporting an error as the oclif command does', async () => {
    // A --config must exist (exit 78 otherwise); --socket still wins over its admin.socket.
    writeFileSync(join(root, 'agent.yaml'), 'admin:\n  socket: /elsewhere/agent.sock\n');
    expect(await fastCtlStatus(['--config', join(root, 'agent.yaml'), '--socket=' + missing, '--json'], { LLMGW_LOG_LEVEL: 'warn' })).toBe(true);
    const message = `the agent is not running: no socket on ${missing}; check \`systemctl status llmgw-agent\` (or pass --socket / LLMGW_SOCKET if it listens elsewhere)`;
    expect(written(stdout)).toBe(`${JSON.stringify({ error: { kind: 'unreachable', message, exitCode: 69 } }, null, 2)}\n`);
    expect(written(stderr)).toBe(`error: ${message}\n`);
    expect(process.exitCode).toBe(69);
  });

  it('takes the socket from LLMGW_SOCKET when --socket is not given', async () => {
    expect(await fastCtlStatus([], { LLMGW_SOCKET: missing })).toBe(true);
    expect(stdout).not.toHaveBeenCalled();
    expect(written(stderr)).toContain(`no socket on ${missing};`);
    expect(process.exitCode).toBe(69);
  });
});
