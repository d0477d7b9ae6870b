import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ShardState, type ShardStatus } from '../../src/gen/llmgw/v1/agent_pb.js';
import type { AgentDirs, AgentProcess } from '../helpers/agent-process.js';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { agentDirs, startAgentProcess } from '../helpers/agent-process.js';
import { stopDoubleAgent } from '../helpers/double-agent.js';
import { FAKE_SGLANG } from '../helpers/fake-engines.js';
import { isRegister, shardIs } from '../helpers/sim-shards.js';
import { startControlPlane } from '../helpers/start-control-plane.js';
import { doubleStart } from '../helpers/double-shards.js';
import { isPortFree } from '../../src/agent/engines/is-port-free.js';
import { freePort } from '../helpers/engine-processes.js';
import type { StartedControlPlane } from '../helpers/start-control-plane.js';

/*
 * Review engine-fidelity-3, E16, on the real agent: SGLang with DP attention
 * derives ports from its own (on one node, --port + 233 … + 239, and + 13:
 * src/agent/engines/shard-bound-ports.ts cites where), which the agent now
 * holds beside the http_port; a second such shard whose block overlaps is
 * refused at once, naming the first, instead of failing 30 s into its start.
 */

const NODE = 'node-dpa';
const S = ShardState;
let cp: StartedControlPlane;
let agent: AgentProcess;
let dirs: AgentDirs;

beforeAll(async () => {
  cp = await startControlPlane();
  dirs = agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-dpa-')));
  mkdirSync(dirs.root, { recursive: true });
  // The double knows no DP attention (it would exit 2 on the flag): the
  // engine's command drops it and runs the double, so that the agent still
  // sees the flag in the profile's args and the shard runs.
  const command = join(dirs.root, 'sglang-without-dp-attention');
  writeFileSync(command, ['#!/bin/sh', 'for a do shift; [ "$a" = --enable-dp-attention ] || set -- "$@" "$a"; done', `exec '${FAKE_SGLANG}' "$@"`, ''].join('\n'), { mode: 0o755 });
  const registered = cp.cp.waitFor(NODE, isRegister, 30_000);
  agent = startAgentProcess({ server: cp.url, dirs, nodeId: NODE, extraYaml: ['engines:', '  sglang:', `    command: [${command}, serve]`, ''].join('\n') });
  await registered;
});

afterAll(() => stopDoubleAgent({ cp, agent, dirs }));

async function settle(id: string, port: number, gpu: number, args: string[]): Promise<ShardStatus> {
  const settled = cp.cp.waitFor(NODE, shardIs(id, S.READY, S.FAILED, S.EXITED), 60_000);
  cp.cp.send(NODE, { case: 'start', value: doubleStart('sglang', id, port, { gpus: [gpu], args }) });
  return (await settled).msg.value as ShardStatus;
}

describe("SGLang DP attention's derived ports", () => {
  it('refuse a second DP-attention shard on the next http_port, naming the first; take one far away, and one without DP attention beside it', { timeout: 120_000 }, async () => {
    const port = await freePort();
    const first = await settle('dpa-1', port, 0, ['--enable-dp-attention']);
    expect(first.state, first.error).toBe(S.READY);
    const close = await settle('dpa-2', port + 1, 1, ['--enable-dp-attention']);
    expect([close.state, close.error]).toEqual([
      S.FAILED,
      `port ${port + 234}, which SGLang's DP attention derives from http_port ${port + 1}, is already in use on this node by shard dpa-1 (port ${port + 234}, which SGLang's DP attention derives from http_port ${port}); give the two shards ports at least 14 apart`,
    ]);
    // Far: a free port whose block misses the first's (drawn again until it does, never left to chance).
    const block = (p: number) => [p, p + 13, ...Array.from({ length: 7 }, (_, i) => p + 233 + i)];
    let farPort = await freePort();
    while (block(farPort).some((p) => block(port).includes(p))) farPort = await freePort();
    const far = await settle('dpa-3', farPort, 2, ['--enable-dp-attention']);
    expect(far.state, far.error).toBe(S.READY);
    // Without DP attention a shard holds its http_port alone: one right beside the first is taken.
    let near = port + 1;
    while (!(await isPortFree(near)) && near < port + 12) near++;
    const plain = await settle('plain-1', near, 5, []);
    expect(plain.state, plain.error).toBe(S.READY);
  });
});
