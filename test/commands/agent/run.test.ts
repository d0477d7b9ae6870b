import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DEFAULT_CONFIG_PATH } from '../../../src/lib/default-paths.js';
import { REPO_ROOT, runCli } from '../../helpers/run-cli.js';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-run-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('llmgw agent run --print-config', () => {
  it('prints every effective value with its source', async () => {
    const r = await runCli(['agent', 'run', '--config', 'examples/agent.yaml', '--print-config', '--heartbeat-interval', '2s'], {
      env: { LLMGW_RECONNECT_MAX: '45s', LLMGW_NODE_ID: 'gpu-node-01' },
    });
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toMatch(/^node_id\s+gpu-node-01\s+env LLMGW_NODE_ID$/m);
    expect(r.stdout).toMatch(/^server\s+http:\/\/127\.0\.0\.1:8443\s+examples\/agent\.yaml:12$/m);
    expect(r.stdout).toMatch(/^heartbeat_interval\s+2s\s+flag --heartbeat-interval$/m);
    expect(r.stdout).toMatch(/^reconnect_max\s+45s\s+env LLMGW_RECONNECT_MAX$/m);
  });

  it('prints JSON with --json', async () => {
    const r = await runCli(['agent', 'run', '--config', 'examples/agent.yaml', '--node-id', 'gpu-node-01', '--print-config', '--json']);
    expect(r.exitCode).toBe(0);
    const out = JSON.parse(r.stdout);
    expect(out.keys.server).toEqual({ value: 'http://127.0.0.1:8443', source: 'examples/agent.yaml:12' });
    expect(out.effective.supervisor.stopGraceMs).toBe(30_000);
  });

  it("takes docs/security.md's engine user and allowlist block as it is written (with nobody for the account it creates)", async () => {
    const readme = readFileSync(join(REPO_ROOT, 'docs/security.md'), 'utf8');
    const block = /```yaml\n# \/etc\/llmgw\/agent\.yaml\n([\s\S]*?)```/.exec(readme)?.[1];
    expect(block, 'docs/security.md has the /etc/llmgw/agent.yaml block').toBeDefined();
    const path = join(dir, 'readme-engines.yaml');
    writeFileSync(path, `node_id: n1\nserver: http://127.0.0.1:8443\n${(block ?? '').replaceAll('llmgw-engine', 'nobody').replace('llmgw-ops', 'users')}`);
    const r = await runCli(['agent', 'run', '--config', path, '--print-config', '--json']);
    expect(r.exitCode, r.stderr).toBe(0);
    const { vllm, sglang } = JSON.parse(r.stdout).effective.engines;
    expect(vllm.user).toMatchObject({ name: 'nobody', uid: 65534 });
    expect(vllm.allowedEnv).toEqual(['HF_TOKEN', 'VLLM_*', 'NCCL_*']);
    expect(vllm.env).toEqual({ HF_HOME: '/var/lib/nobody/hf' });
    expect(sglang.user).toMatchObject({ name: 'nobody' });
  });

  it('exits 78 with one line and no stack trace on a configuration error', async () => {
    const path = join(dir, 'bad.yaml');
    writeFileSync(path, 'node_id: a\nserver: http://cp:1\nheartbeat_interval: fast\n');
    const r = await runCli(['agent', 'run', '--config', path, '--print-config']);
    expect(r.exitCode).toBe(78);
    expect(r.stderr.trim().split('\n')).toEqual([
      `error: heartbeat_interval: "fast" is not a duration; write it like 500ms, 5s, 2m or 1h (${path}:3)`,
    ]);
  });

  it('exits 78 when TLS settings contradict the server scheme given by flag', async () => {
    const cert = join(dir, 'c.pem');
    writeFileSync(cert, 'x');
    const path = join(dir, 'tls.yaml');
    writeFileSync(path, `node_id: a\nserver: https://cp:1\ntls:\n  cert: ${cert}\n  key: ${cert}\n`);
    const r = await runCli(['agent', 'run', '--config', path, '--server', 'http://cp:1', '--print-config']);
    expect(r.exitCode).toBe(78);
    expect(r.stderr.trim()).toBe('error: tls is configured but server is an http:// address; use https:// (flag --server)');
  });

  // The default file is what a new node lacks; an explicit --config that does not exist stays an error (78).
  it.skipIf(existsSync(DEFAULT_CONFIG_PATH))('prints what it has with no config file, marking the missing required keys, and exits 78 as the start would', async () => {
    const missing = DEFAULT_CONFIG_PATH;
    const env = { LLMGW_CONFIG: undefined, LLMGW_NODE_ID: undefined, LLMGW_SERVER: undefined, LLMGW_HEARTBEAT_INTERVAL: '3s' };
    const r = await runCli(['agent', 'run', '--print-config'], { env });
    expect(r.exitCode).toBe(78);
    expect(r.stdout).toContain(`config file: ${missing} (not found)`);
    expect(r.stdout).toContain('missing required keys: node_id, server');
    expect(r.stdout).toMatch(/^node_id\s+<missing>\s+required: /m);
    expect(r.stdout).toMatch(/^heartbeat_interval\s+3s\s+env LLMGW_HEARTBEAT_INTERVAL$/m);
    expect(r.stderr).toContain(`error: the agent would not start: node_id is required (set it in ${missing} (not found), LLMGW_NODE_ID, --node-id)`);
    const printed = await runCli(['agent', 'run', '--print-config', '--json'], { env });
    expect(printed.exitCode).toBe(78);
    const json = JSON.parse(printed.stdout);
    expect(json).toMatchObject({ configFileFound: false, missingRequired: ['node_id', 'server'], startable: false, effective: null });
    expect(json.keys.server).toEqual({ value: null, source: 'missing' });
    // Without --print-config nothing has changed: the agent refuses to start.
    expect((await runCli(['agent', 'run'], { env })).exitCode).toBe(78);
    expect((await runCli(['agent', 'run', '--config', join(dir, 'no-such.yaml'), '--print-config'], { env })).exitCode).toBe(78);
  });

  it('checks what a start checks: an admin.group that does not exist is exit 78, with the table still printed', async () => {
    const path = join(dir, 'unstartable.yaml');
    const state = mkdtempSync(join(dir, 'state-'));
    writeFileSync(path, `node_id: a\nserver: http://127.0.0.1:1\nsupervisor:\n  state_dir: ${state}\n  log_dir: ${state}/log\nadmin:\n  socket: ${state}/agent.sock\n  group: llmgw-opz\n`);
    const r = await runCli(['agent', 'run', '--config', path, '--print-config']);
    expect(r.exitCode).toBe(78);
    expect(r.stdout).toMatch(/^admin\.group\s+llmgw-opz\s+\S+:8$/m);
    expect(r.stdout).toContain('would not start: admin.group: no group named "llmgw-opz" in /etc/group; create it (groupadd llmgw-opz)');
    expect(r.stderr.trim().split('\n')).toEqual([
      'error: the agent would not start: admin.group: no group named "llmgw-opz" in /etc/group; create it (groupadd llmgw-opz) or set admin.group to an existing group',
    ]);
    // The start itself agrees.
    expect((await runCli(['agent', 'run', '--config', path])).exitCode).toBe(78);
    const json = JSON.parse((await runCli(['agent', 'run', '--config', path, '--print-config', '--json'])).stdout);
    expect(json).toMatchObject({ startable: false, missingRequired: [], startProblems: expect.arrayContaining([expect.stringContaining('admin.group')]) });
  });

  it('exits 78 for a state directory others may write to, as the start refuses it', async () => {
    const open = join(dir, 'open-state');
    mkdirSync(open, { mode: 0o777 });
    chmodSync(open, 0o777);
    const path = join(dir, 'open-state.yaml');
    writeFileSync(path, `node_id: a\nserver: http://127.0.0.1:1\nsupervisor:\n  state_dir: ${open}\n`);
    const r = await runCli(['agent', 'run', '--config', path, '--print-config']);
    expect(r.exitCode).toBe(78);
    expect(r.stderr).toContain(`error: the agent would not start: supervisor.state_dir: directory ${open} is writable by group or others`);
  });

  it('warns about a misspelt LLMGW_* variable it ignores, naming the one meant, in --print-config and in the agent log', async () => {
    const path = join(dir, 'node-from-file.yaml');
    writeFileSync(path, 'node_id: from-file\nserver: http://127.0.0.1:1\n');
    const r = await runCli(['agent', 'run', '--config', path, '--print-config'], { env: { LLMGW_NODEID: 'x' } });
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toContain('warning: LLMGW_NODEID is not a variable the agent reads, and is ignored; did you mean LLMGW_NODE_ID?');
    expect(r.stdout).toMatch(/^node_id\s+from-file\s+\S+:1$/m);
    const json = JSON.parse((await runCli(['agent', 'run', '--config', path, '--print-config', '--json'], { env: { LLMGW_NODEID: 'x' } })).stdout);
    expect(json.envWarnings).toEqual(['LLMGW_NODEID is not a variable the agent reads, and is ignored; did you mean LLMGW_NODE_ID?']);
    // The agent itself logs it before anything else can stop it (here: an admin group that does not exist).
    const refused = join(dir, 'refused.yaml');
    const state = mkdtempSync(join(dir, 'state-'));
    writeFileSync(refused, `node_id: a\nserver: http://127.0.0.1:1\nsupervisor:\n  state_dir: ${state}\n  log_dir: ${state}/log\nadmin:\n  socket: ${state}/agent.sock\n  group: llmgw-opz\n`);
    const run = await runCli(['agent', 'run', '--config', refused], { env: { LLMGW_NODEID: 'x' } });
    expect(run.exitCode).toBe(78);
    expect(run.stderr).toMatch(/"env":"LLMGW_NODEID","meant":"LLMGW_NODE_ID".*did you mean LLMGW_NODE_ID\?/);
  });

  it('still exits 78 for an invalid config when required keys are missing too', async () => {
    const path = join(dir, 'bad-no-node.yaml');
    writeFileSync(path, 'heartbeat_interval: fast\n');
    const r = await runCli(['agent', 'run', '--config', path, '--print-config'], { env: { LLMGW_NODE_ID: undefined, LLMGW_SERVER: undefined } });
    expect(r.exitCode).toBe(78);
    expect(r.stderr).toContain('heartbeat_interval: "fast" is not a duration');
  });

  it('cuts long values in the table with an ellipsis; --json has them whole', async () => {
    const path = join(dir, 'long.yaml');
    const labels = Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`label-${i}`, 'v'.repeat(10)]));
    writeFileSync(path, `node_id: a\nserver: http://127.0.0.1:1\nlabels: ${JSON.stringify(labels)}\n`);
    const r = await runCli(['agent', 'run', '--config', path, '--print-config']);
    const row = r.stdout.split('\n').find((l) => l.startsWith('labels')) as string;
    expect(row).toMatch(/…\s+\S+:3$/);
    expect(Math.max(...r.stdout.split('\n').map((l) => l.length))).toBeLessThan(160);
    const json = JSON.parse((await runCli(['agent', 'run', '--config', path, '--print-config', '--json'])).stdout);
    expect(json.keys.labels.value).toEqual(labels);
  });

  it('exits 2 on an unknown flag', async () => {
    const r = await runCli(['agent', 'run', '--bogus']);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toContain('--bogus');
  });
});
