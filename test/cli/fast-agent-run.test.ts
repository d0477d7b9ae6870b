import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { execa } from 'execa';
import { type MockInstance, afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { fastAgentRun } from '../../src/cli/fast-agent-run.js';
import { agentConfigYaml, agentDirs } from '../helpers/agent-config-yaml.js';
import { killEverything } from '../helpers/engine-processes.js';
import { BIN, type CliResult, runCli } from '../helpers/run-cli.js';
import { isRegister } from '../helpers/sim-shards.js';
import { startControlPlane } from '../helpers/start-control-plane.js';

const PACKAGE_VERSION = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')).version;

/** --log-level is left to oclif by the fast path: the same command line, through oclif. */
const VIA_OCLIF = ['--log-level', 'info'];

describe('fastAgentRun', () => {
  type WriteSpy = MockInstance<typeof process.stdout.write>;
  let stdout: WriteSpy;
  let stderr: WriteSpy;
  beforeEach(() => {
    stdout = vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
    stderr = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
  });
  afterEach(() => vi.restoreAllMocks());

  it.each([
    ['help', ['--help']],
    ['--print-config', ['--config', 'a.yaml', '--print-config']],
    ['--json', ['--json']],
    ['--log-level', ['--log-level', 'info']],
    ['an unknown flag', ['--nodeid', 'x']],
    ['a name from Object.prototype', ['--toString', 'x']],
    ['an argument', ['extra']],
    ['-c=X, which oclif reads as "=X"', ['-c=a.yaml']],
    ['-cX', ['-ca.yaml']],
    ['a missing value', ['--config']],
    ['an empty value', ['--server=']],
    ['a flag where the value should be', ['--server', '--config']],
    ['a repeated flag', ['--server', 'a', '--server=b']],
    ['--config and -c together', ['--config', 'a', '-c', 'b']],
    ['--', ['--', '--config', 'a']],
  ])('leaves %s to oclif, doing nothing', async (_, args) => {
    expect(await fastAgentRun(args, {})).toBe(false);
    expect(stdout).not.toHaveBeenCalled();
    expect(stderr).not.toHaveBeenCalled();
  });

  it.each([
    ['LLMGW_CONTENT_TYPE (oclif switches to JSON output)', { LLMGW_CONTENT_TYPE: 'json' }],
    ['a LLMGW_LOG_LEVEL oclif would refuse', { LLMGW_LOG_LEVEL: 'loud' }],
    ['an empty LLMGW_CONFIG', { LLMGW_CONFIG: '' }],
  ])('leaves the command to oclif with %s', async (_, env) => {
    expect(await fastAgentRun(['--config', 'a.yaml'], env)).toBe(false);
    expect(stderr).not.toHaveBeenCalled();
  });
});

describe('llmgw agent run with and without oclif', () => {
  let root: string;
  beforeAll(() => {
    root = mkdtempSync(join(tmpdir(), 'llmgw-fast-run-'));
  });
  afterAll(async () => {
    await killEverything(join(root, 'log'));
    rmSync(root, { recursive: true, force: true });
  });

  /** The same command line by the fast path and through oclif, run together: each refusal changes nothing. */
  const both = (args: string[], env: Record<string, string | undefined> = {}): Promise<[CliResult, CliResult]> =>
    Promise.all([runCli(['agent', 'run', ...args], { env }), runCli(['agent', 'run', ...args, ...VIA_OCLIF], { env })]);

  it.each([
    ['a value that is not a duration', 'node_id: a\nserver: http://127.0.0.1:1\nheartbeat_interval: fast\n', []],
    ['a required key missing', 'server: http://127.0.0.1:1\n', []],
    ['an override flag that contradicts the file', 'node_id: a\nserver: http://127.0.0.1:1\n', ['--protocol', 'carrier-pigeon']],
  ])('refuses a configuration with %s by the same line and exit 78', async (_, yaml, extra) => {
    const path = join(root, `bad-${Math.random().toString(36).slice(2)}.yaml`);
    writeFileSync(path, yaml);
    const env = { LLMGW_NODE_ID: undefined, LLMGW_SERVER: undefined, LLMGW_PROTOCOL: undefined };
    const [fast, oclif] = await both(['--config', path, ...extra], env);
    expect(fast.exitCode).toBe(78);
    expect(oclif.exitCode).toBe(78);
    expect(fast.stderr).toMatch(/^error: .+\n?$/);
    expect(fast.stderr).toBe(oclif.stderr);
    expect(fast.stdout).toBe(oclif.stdout);
  });

  it('refuses a --config that does not exist by the same line and exit 78', async () => {
    const [fast, oclif] = await both(['-c', join(root, 'no-such.yaml')]);
    expect([fast.exitCode, oclif.exitCode]).toEqual([78, 78]);
    expect(fast.stderr).toContain('no-such.yaml');
    expect(fast.stderr).toBe(oclif.stderr);
  });

  it('registers without loading oclif, stops on SIGTERM with exit 0, as it does through oclif', async () => {
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
    const { cp, url } = await startControlPlane();
    // The two agents (own node ids, directories and configs) run together.
    const run = async (i: number, extra: string[]) => {
      const dirs = agentDirs(join(root, `run-${i}`));
      const config = join(root, `run-${i}.yaml`);
      writeFileSync(config, agentConfigYaml({ server: url, dirs, nodeId: `fast-${i}` }));
      const registered = cp.waitFor(`fast-${i}`, isRegister, 30_000);
      const child = execa(process.execPath, [BIN, 'agent', 'run', '--config', config, '--heartbeat-interval', '1s', ...extra], {
        reject: false,
        stdin: 'ignore',
        env: { LLMGW_FAKE_GPUS: 'hgx-h100x8', NODE_OPTIONS: `--import=${pathToFileURL(preload).href}` },
      });
      try {
        const register = await registered;
        // oclif's config.version, which the fast path reads from package.json itself.
        expect(register.msg.case === 'register' && register.msg.value.version).toBe(PACKAGE_VERSION);
        child.kill('SIGTERM');
        const r = await child;
        expect(r.exitCode).toBe(0);
        expect(String(r.stderr)).toMatch(new RegExp(`\\n@oclif/core loaded: ${i === 1}\\n?$`));
        expect(String(r.stderr)).toContain('"msg":"agent stopped"');
      } finally {
        child.kill('SIGKILL');
      }
    };
    // Both settled before the test ends, so neither agent outlives it whichever fails.
    const results = await Promise.allSettled([run(0, []), run(1, VIA_OCLIF)]);
    for (const r of results) if (r.status === 'rejected') throw r.reason;
  });
});
