import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AgentMessage, ShardState, type StartShard, StartShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { freePort } from '../faults/scenarios/fault-harness.js';
import { agentDirs } from '../helpers/agent-process.js';
import { freeFakeGpu } from '../helpers/fake-gpus.js';
import { runCli } from '../helpers/run-cli.js';
import { expectAgentUnharmed } from './agent-unharmed.js';
import { bootAgentAgainst, type HostileControlPlane, startHostileControlPlane } from './hostile-control-plane.js';

/*
 * Finding N1 of the second security review, the rest of it, against the real
 * agent: profile args that load code or open files (--trust-remote-code,
 * --tool-parser-plugin FILE, --allowed-local-media-path /, --chat-template
 * /etc/shadow, --download-dir /etc) and a local model (/etc) went into the
 * engine's argv as sent, and the engine ran as root with nothing said. A
 * stand-in `vllm` records its uid and argv for every start, so a refused
 * start is seen not to launch anything and the allowed one is seen to.
 */

const root = mkdtempSync(join(tmpdir(), 'llmgw-sec-args-'));
const markers = join(root, 'markers');
const recorder = join(root, 'bin', 'vllm');
let cp: HostileControlPlane;

beforeAll(async () => {
  mkdirSync(markers, { recursive: true });
  mkdirSync(join(root, 'bin'), { recursive: true });
  // One record per start, named by its GPU; then it stays up, as a loading engine does.
  // Written aside and renamed: a test that sees the marker reads it whole (it once read the file the shell had only created).
  writeFileSync(
    recorder,
    `#!/bin/sh\nf="${markers}/vllm-$CUDA_VISIBLE_DEVICES"\n{ id -u; for a in "$@"; do printf '%s\\n' "$a"; done; } > "$f.tmp" && mv "$f.tmp" "$f"\nexec sleep 60\n`,
    { mode: 0o755 },
  );
  cp = await startHostileControlPlane();
});
afterAll(async () => {
  await cp?.close();
  if (!process.env.SEC_DEBUG) rmSync(root, { recursive: true, force: true });
});

const ENGINES_YAML = (more = '') => `engines:\n  vllm:\n    command: [${JSON.stringify(recorder)}]\n${more}`;

function start(shardId: string, profile: Omit<MessageInitShape<typeof StartShardSchema>['profile'] & object, '$typeName'>, gpu: number): StartShard {
  return create(StartShardSchema, {
    shardId,
    replicaId: `r-${shardId}`,
    nnodes: 1,
    gpuIndices: [gpu],
    httpPort: 0,
    profile: { name: 'p', engine: 'vllm', model: 'org/model', servedModelName: 'm', tensorParallelSize: 1, ...profile },
  });
}

const settled = (id: string) => (m: AgentMessage) =>
  m.msg.case === 'shard' && m.msg.value.shardId === id && [ShardState.FAILED, ShardState.STARTING, ShardState.READY].includes(m.msg.value.state);

/** The shard's final word; a spec without a port gets a free one, so that only what is under test can refuse it. */
async function outcome(spec: StartShard): Promise<{ state: string; error: string }> {
  if (spec.httpPort === 0) spec.httpPort = await freePort();
  cp.send({ case: 'start', value: spec });
  const s = (await cp.waitFor(settled(spec.shardId), 60_000)).msg.value as { state: ShardState; error: string };
  return { state: ShardState[s.state], error: s.error };
}

const refusedArg = (id: string, flag: string) => ({
  state: 'FAILED',
  error: `shard ${id}: profile args set ${flag}, which loads code, opens files or reaches an endpoint on this node; list ${flag} in engines.vllm.allowed_args to allow it`,
});

/** What the stand-in vllm recorded for the engine on `gpu`: its uid, then its argv. */
const recordOf = (gpu: number) => readFileSync(join(markers, `vllm-${gpu}`), 'utf8').trimEnd().split('\n');

describe('profile args that load code or open files, a local model, and root engines (security review 2, N1)', () => {
  it('refuses each of the review\'s args and a local model, naming the flag and the key to set, and launches nothing', { timeout: 120_000 }, async () => {
    const agent = await bootAgentAgainst(cp, { dirs: agentDirs(join(root, 'args')), nodeId: 'args-node', extraYaml: ENGINES_YAML() });
    const gpu = freeFakeGpu(0);
    expect(await outcome(start('trc', { args: ['--trust-remote-code'] }, gpu))).toEqual(refusedArg('trc', '--trust-remote-code'));
    expect(await outcome(start('plugin', { args: ['--tool-parser-plugin', '/tmp/x.py'] }, gpu))).toEqual(refusedArg('plugin', '--tool-parser-plugin'));
    expect(await outcome(start('media', { args: ['--allowed-local-media-path', '/'] }, gpu))).toEqual(refusedArg('media', '--allowed-local-media-path'));
    expect(await outcome(start('shadow', { args: ['--chat-template', '/etc/shadow'] }, gpu))).toEqual(refusedArg('shadow', '--chat-template'));
    expect(await outcome(start('dldir', { args: ['--download-dir', '/etc'] }, gpu))).toEqual(refusedArg('dldir', '--download-dir'));
    // As vLLM's parser also takes them: underscores, abbreviated.
    expect(await outcome(start('trc2', { args: ['--trust_remote_code'] }, gpu))).toEqual(refusedArg('trc2', '--trust-remote-code'));
    expect((await outcome(start('trc3', { args: ['--trust-remote'] }, gpu))).error).toBe(
      'shard trc3: profile args set --trust-remote (--trust-remote-code), which loads code, opens files or reaches an endpoint on this node; list --trust-remote-code in engines.vllm.allowed_args to allow it',
    );
    expect(await outcome(start('model', { model: '/etc' }, gpu))).toEqual({
      state: 'FAILED',
      error:
        'shard model: profile.model "/etc" is a local path, not a hub repo id (org/name), and engines.vllm.model_roots is empty; use a hub repo id, or list the directory that holds it in engines.vllm.model_roots',
    });
    expect((await outcome(start('model2', { model: 'org/../../etc' }, gpu))).error).toMatch(/^shard model2: profile\.model "org\/\.\.\/\.\.\/etc" is a local path/);
    // Security review 3, S6: sleep_mode opens vLLM's keyless dev endpoints; the operator, not a profile, opens them.
    expect(await outcome(start('sleepy', { sleepMode: true }, gpu))).toEqual({
      state: 'FAILED',
      error:
        "shard sleepy: profile p sets sleep_mode, which opens vLLM's dev endpoints (/sleep, /collective_rpc) without a key; set engines.vllm.allow_sleep_mode: true once the engine ports are firewalled to the router and the agent",
    });
    // Nothing launched: the stand-in never ran, and no state file was kept.
    expect(readdirSync(markers)).toEqual([]);
    expect(existsSync(join(root, 'args', 'state', 'shards', 'trc.json'))).toBe(false);
    expectAgentUnharmed(agent.pid);
    await agent.stop();
  });

  it('refuses every engine of a root agent that has neither engines.<name>.user nor allow_root, says so at start and in ctl status', { timeout: 120_000 }, async () => {
    const dirs = agentDirs(join(root, 'rootless'));
    const agent = await bootAgentAgainst(cp, { dirs, nodeId: 'root-node', extraYaml: ENGINES_YAML(), allowRoot: false });
    expect(await outcome(start('as-root', { args: [] }, freeFakeGpu(1)))).toEqual({
      state: 'FAILED',
      error:
        'shard as-root: engines.vllm.user is empty and the agent runs as root, so the engine would run as root; set engines.vllm.user to an unprivileged account (useradd --system llmgw-engine), or engines.vllm.allow_root: true to run it as root',
    });
    expect(readdirSync(markers)).toEqual([]);
    const warned = agent.logs().find((r) => r.engine === 'vllm' && String(r.msg).includes('every start of it will be refused'));
    expect(warned?.msg).toBe('vllm → root: refused; set engines.vllm.user to an unprivileged account (or engines.vllm.allow_root: true): every start of it will be refused');
    const status = await runCli(['ctl', 'status', '--socket', dirs.socket, '--json']);
    expect(JSON.parse(status.stdout).engineAccounts).toContainEqual({ engine: 'vllm', user: 'root', uid: 0, configured: false, allowRoot: false, refused: true });
    const human = await runCli(['ctl', 'status', '--socket', dirs.socket]);
    expect(human.stdout).toMatch(/^account {4}vllm → root: refused; set engines\.vllm\.user/m);
    expectAgentUnharmed(agent.pid);
    await agent.stop();
  });

  it('starts the engine with --trust-remote-code once the operator lists it in engines.vllm.allowed_args, and a model under a model root', { timeout: 120_000 }, async () => {
    const models = join(root, 'models');
    mkdirSync(join(models, 'llama'), { recursive: true });
    const dirs = agentDirs(join(root, 'allowed'));
    const agent = await bootAgentAgainst(cp, {
      dirs,
      nodeId: 'allowed-node',
      extraYaml: ENGINES_YAML(`    allowed_args: [--trust-remote-code]\n    model_roots: [${JSON.stringify(models)}]\n`),
    });
    const gpu = freeFakeGpu(2);
    expect((await outcome(start('allowed', { model: join(models, 'llama'), args: ['--trust-remote-code'] }, gpu))).state).toBe('STARTING');
    await expect.poll(() => existsSync(join(markers, `vllm-${gpu}`)), { timeout: 30_000 }).toBe(true);
    const [uid, ...argv] = recordOf(gpu);
    expect(uid).toBe('0'); // allow_root, which the test agent sets
    expect(argv[0]).toBe(join(models, 'llama'));
    expect(argv).toContain('--trust-remote-code');
    // Listing one flag allows that one only.
    expect(await outcome(start('still', { args: ['--trust-remote-code', '--download-dir', '/etc'] }, freeFakeGpu(3)))).toEqual(refusedArg('still', '--download-dir'));
    expectAgentUnharmed(agent.pid);
  });
});
