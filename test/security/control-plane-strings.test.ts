import { create } from '@bufbuild/protobuf';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
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
 * Finding 11 of the security review, against the real agent: a replica id
 * or model from the control plane, and an engine's last output, reached the
 * operator's terminal raw through `ctl status`. The review's row cleared the
 * screen, set the window title and hid the rest of itself. The agent now
 * refuses such names at StartShard, and ctl escapes whatever else it prints
 * that another party wrote (test/ctl/render-status.test.ts shows it); a
 * dying engine's escape sequences stay in its log and last_output.
 */

const CLEAR_AND_TITLE = '\u001b[2J\u001b[H\u001b]0;owned-title\u0007';
const HIDE = '\u001b[8m';
const root = mkdtempSync(join(tmpdir(), 'llmgw-sec-strings-'));
const dirs = agentDirs(root);
const fakeVllm = join(root, 'vllm');
let cp: HostileControlPlane;

beforeAll(async () => {
  // An engine whose last words are escape sequences, then exit 3.
  writeFileSync(fakeVllm, "#!/bin/sh\nprintf 'loading\\n'\nprintf 'boom \\033[2J\\033[H\\033]0;owned-title\\007hidden\\033[8m\\n'\nexit 3\n", { mode: 0o755 });
  cp = await startHostileControlPlane();
});
afterAll(async () => {
  await cp?.close();
  rmSync(root, { recursive: true, force: true });
});

function start(shardId: string, engine: string, replicaId: string, model: string, gpu: number, port: number): StartShard {
  return create(StartShardSchema, {
    shardId,
    replicaId,
    nnodes: 1,
    gpuIndices: [gpu],
    httpPort: port,
    profile: { name: 'p', engine, model, servedModelName: 'm', tensorParallelSize: 1, args: engine === 'sim' ? ['--load-time', '100ms'] : [] },
  });
}

const settled = (id: string) => (m: AgentMessage) =>
  m.msg.case === 'shard' && m.msg.value.shardId === id && [ShardState.FAILED, ShardState.READY].includes(m.msg.value.state);

async function outcome(spec: StartShard): Promise<{ state: string; error: string }> {
  cp.send({ case: 'start', value: spec });
  const m = await cp.waitFor(settled(spec.shardId), 60_000);
  const s = m.msg.value as { state: ShardState; error: string };
  return { state: ShardState[s.state], error: s.error };
}

describe('strings from the control plane and engines never reach the terminal raw (security review, finding 11)', () => {
  it("refuses control characters in replica ids and models, and an engine's escape sequences stay out of ctl status", { timeout: 120_000 }, async () => {
    const agent = await bootAgentAgainst(cp, {
      dirs,
      nodeId: 'strings-node',
      extraYaml: `engines:\n  vllm:\n    command: [${JSON.stringify(fakeVllm)}]\n`,
    });

    // The review's row: replica id and model carrying the sequences.
    const replica = await outcome(start('ansi-g1-r0', 'sim', `r${CLEAR_AND_TITLE}`, 'sim/m', freeFakeGpu(0), await freePort()));
    expect(replica).toEqual({ state: 'FAILED', error: 'shard ansi-g1-r0: replica_id contains the control character \\x1b; use printable text' });
    const model = await outcome(start('ansi-g2-r0', 'sim', 'r-ok', `m${HIDE}`, freeFakeGpu(1), await freePort()));
    expect(model).toEqual({ state: 'FAILED', error: 'shard ansi-g2-r0: profile.model contains the control character \\x1b; use printable text' });
    // Printable unicode is a name like any other: this one serves.
    const unicode = await outcome(start('uni-g1-r0', 'sim', 'réplica-模型', 'Qwen/通义千问', freeFakeGpu(2), await freePort()));
    expect(unicode.state).toBe('READY');

    // An engine's output is its own business: the control plane gets its last lines as they are (last_output), and ctl status shows none of it.
    cp.send({ case: 'start', value: start('dies-g1-r0', 'vllm', 'r-dies', 'meta/llama', freeFakeGpu(3), await freePort()) });
    const died = await cp.waitFor(settled('dies-g1-r0'), 60_000);
    if (died.msg.case !== 'shard') throw new Error('not a shard status');
    expect(ShardState[died.msg.value.state]).toBe('FAILED');
    expect(died.msg.value.lastOutput.join('\n')).toContain(`boom ${CLEAR_AND_TITLE}hidden`);

    // --all: the FAILED shard's engine is gone, so plain `ctl status` leaves it out.
    const r = await runCli(['ctl', 'status', '--all', '--socket', dirs.socket]);
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stdout).toContain('uni-g1-r0');
    expect(r.stdout).toContain('réplica-模型');
    expect(r.stdout).toContain('dies-g1-r0');
    expect(r.stdout).toMatch(/dies-g1-r0 .* FAILED /);
    // biome-ignore lint/suspicious/noControlCharactersInRegex: no control character but the line ends may reach the terminal
    expect(r.stdout).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/);

    expectAgentUnharmed(agent.pid);
  });
});
