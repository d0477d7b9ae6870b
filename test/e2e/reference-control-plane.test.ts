import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it } from 'vitest';
import type { ControlPlane } from '../../src/control/control-plane.js';
import { parseDeployment } from '../../src/control/load-deployment.js';
import type { ReplicaView } from '../../src/control/replica-view.js';
import { type AgentMessage, type Register, ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import { type AgentDirs, type AgentProcess, agentDirs, cleanUpEnginesAfterTest, startAgentProcess } from '../helpers/agent-process.js';
import { captureLogger, sentCommands } from '../helpers/capture-logger.js';
import { isRunning, processesWritingUnder, until } from '../helpers/engine-processes.js';
import { isRegister } from '../helpers/sim-shards.js';
import { startControlPlane } from '../helpers/start-control-plane.js';

/**
 * The reference control plane with real agents (`llmgw agent run` processes,
 * each with its own node id, state, log and socket directories, each on the
 * fake 8-GPU box) and real sim engines: what `llmgw dev up` and a fleet do,
 * on one machine.
 */

const TWO_NODE = parseDeployment(
  `
profiles:
  big:
    engine: sim
    model: sim/big
    served_model_name: big
    pipeline_parallel_size: 2
    args: [--load-time, 500ms]
    startup_timeout: 1m
replicas:
  - name: big
    profile: big
    nnodes: 2
    gpus_per_shard: 1
`,
  'two-node.yaml',
);

const ONE_NODE = parseDeployment(
  `
profiles:
  tiny:
    engine: sim
    model: sim/tiny
    served_model_name: tiny
    args: [--load-time, 500ms]
    startup_timeout: 1m
replicas:
  - name: tiny
    profile: tiny
`,
  'one-node.yaml',
);

/**
 * Shard ports for one test: a block of its own, away from the default
 * 18000-18999 that `llmgw dev up` and other suites on this machine use. A
 * clash would make an engine fail to bind, and a retried start is exactly
 * what these tests count.
 */
function portRange(): [number, number] {
  const first = 20_000 + Math.floor(Math.random() * 400) * 20;
  return [first, first + 19];
}

/** Safety net for a test that brings up agents and engines; never reached when things work. */
const E2E_TIMEOUT_MS = 120_000;

const roots: string[] = [];
// After every test's own cleanup (agents and engines killed) has run.
afterAll(() => {
  for (const root of roots) rmSync(root, { recursive: true, force: true });
});

function newDirs(): AgentDirs {
  const dirs = agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-e2e-')));
  roots.push(dirs.root);
  cleanUpEnginesAfterTest(dirs);
  return dirs;
}

const readyStatus = (shardId: string) => (m: AgentMessage) => m.msg.case === 'shard' && m.msg.value.shardId === shardId && m.msg.value.state === ShardState.READY;

function replica(cp: ControlPlane): ReplicaView {
  return cp.replicas()[0] as ReplicaView;
}

const allReady = (cp: ControlPlane) => replica(cp).phase === 'ready' && replica(cp).shards.every((s) => s.state === ShardState.READY);

async function chat(url: string, model: string): Promise<string> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
    signal: AbortSignal.timeout(5_000),
  });
  if (res.status !== 200) throw new Error(`chat completion answered ${res.status}`);
  const body = (await res.json()) as { choices: { message: { content: string } }[] };
  return body.choices[0]?.message.content ?? '';
}

/** Sends a chat completion every 200 ms until stopped; every failure is kept with when it happened. */
function chatLoop(url: string, model: string) {
  const failures: string[] = [];
  let answered = 0;
  let running = true;
  const done = (async () => {
    while (running) {
      try {
        if ((await chat(url, model)).length > 0) answered++;
        else failures.push(`${new Date().toISOString()} empty answer`);
      } catch (err) {
        failures.push(`${new Date().toISOString()} ${String(err)}`);
      }
      await sleep(200);
    }
  })();
  return {
    async stop() {
      running = false;
      await done;
      return { failures, answered };
    },
  };
}

/** Waits until the node's agent reports the shard READY: in its Register, or in a status after it. */
async function reReportedReady(cp: ControlPlane, nodeId: string, shardId: string, registered: Promise<AgentMessage>): Promise<Register> {
  const ready = cp.waitFor(nodeId, readyStatus(shardId), 30_000);
  const reg = (await registered).msg.value as Register;
  if (reg.runningShards.find((s) => s.shardId === shardId)?.state !== ShardState.READY) await ready;
  else ready.catch(() => {});
  return reg;
}

describe('the reference control plane with real agents', () => {
  it(
    'keeps a 2-node replica across a kill -9 of rank 1’s agent: same engine pids, no new StartShard, both ranks READY, answering throughout',
    async () => {
      const { logger, records } = captureLogger();
      const { cp, url } = await startControlPlane({ deployment: TWO_NODE, portRange: portRange(), logger });
      const dirs: Record<string, AgentDirs> = { 'node-a': newDirs(), 'node-b': newDirs() };
      const agents: Record<string, AgentProcess> = {
        'node-a': startAgentProcess({ server: url, dirs: dirs['node-a'] as AgentDirs, nodeId: 'node-a' }),
        'node-b': startAgentProcess({ server: url, dirs: dirs['node-b'] as AgentDirs, nodeId: 'node-b' }),
      };
      await until(() => allReady(cp), 'the 2-node replica to be READY', 60_000);

      const view = replica(cp);
      const [rank0, rank1] = view.shards;
      if (!rank0 || !rank1) throw new Error(`expected two shards, got ${JSON.stringify(view.shards)}`);
      expect([rank0.rank, rank1.rank]).toEqual([0, 1]);
      expect(rank0.nodeId).not.toBe(rank1.nodeId);
      expect(view.url).toBe(`http://127.0.0.1:${rank0.httpPort}`);
      const enginesOf = (nodeId: string) => processesWritingUnder((dirs[nodeId] as AgentDirs).logDir);
      const pids = { rank0: enginesOf(rank0.nodeId), rank1: enginesOf(rank1.nodeId) };
      expect(pids.rank0).toHaveLength(1);
      // The worker rank serves no HTTP; it is judged by staying alive.
      expect(pids.rank1).toHaveLength(1);
      expect(readFileSync(`/proc/${pids.rank1[0]}/cmdline`, 'utf8').split('\0')).toContain('--worker');
      expect(readFileSync(`/proc/${pids.rank0[0]}/cmdline`, 'utf8').split('\0')).not.toContain('--worker');
      expect(sentCommands(records, 'start')).toHaveLength(2);

      const traffic = chatLoop(view.url as string, 'big');
      const rank1Agent = agents[rank1.nodeId] as AgentProcess;
      rank1Agent.kill('SIGKILL');
      await rank1Agent.exited;
      expect(pids.rank1.filter(isRunning)).toEqual(pids.rank1);

      const registered = cp.waitFor(rank1.nodeId, isRegister, 30_000);
      startAgentProcess({ server: url, dirs: dirs[rank1.nodeId] as AgentDirs, nodeId: rank1.nodeId });
      const reg = await reReportedReady(cp, rank1.nodeId, rank1.shardId, registered);
      expect(reg.runningShards.map((s) => [s.shardId, s.pid])).toEqual([[rank1.shardId, pids.rank1[0]]]);
      await until(() => allReady(cp), 'both ranks READY again', 30_000);
      // A little more traffic after the restart, then the verdict.
      await sleep(1_000);
      const { failures, answered } = await traffic.stop();

      expect(failures).toEqual([]);
      expect(answered).toBeGreaterThan(0);
      expect(enginesOf(rank0.nodeId)).toEqual(pids.rank0);
      expect(enginesOf(rank1.nodeId)).toEqual(pids.rank1);
      expect(sentCommands(records, 'start')).toHaveLength(2);
      expect(sentCommands(records, 'stop')).toEqual([]);
      expect(replica(cp)).toMatchObject({ phase: 'ready', generation: 1, shards: [{ shardId: rank0.shardId }, { shardId: rank1.shardId }] });
    },
    E2E_TIMEOUT_MS,
  );

  it(
    'keeps a shard across its own restart on the same port: the agent re-registers it, same engine pid, no StartShard',
    async () => {
      const ports = portRange();
      const first = await startControlPlane({ deployment: ONE_NODE, portRange: ports });
      const dirs = newDirs();
      startAgentProcess({ server: first.url, dirs });
      await until(() => allReady(first.cp), 'the replica to be READY', 60_000);
      const { shardId } = replica(first.cp).shards[0] as { shardId: string };
      const url = replica(first.cp).url as string;
      const [pid] = processesWritingUnder(dirs.logDir);
      expect(pid).toBeGreaterThan(0);
      await first.close();

      // The default-like settle delay is what keeps a restarted control
      // plane from placing a second copy before the node has re-registered.
      const placementDelayMs = 1_000;
      const { logger, records } = captureLogger();
      const second = await startControlPlane({ deployment: ONE_NODE, portRange: ports, port: first.port, placementDelayMs, logger });
      // It listens by now, and placement runs placementDelayMs after it listens (reconciler.ts): by this time + the delay.
      const placedBy = Date.now() + placementDelayMs;
      const registered = second.cp.waitFor('node-a', isRegister, 30_000);
      const reg = await reReportedReady(second.cp, 'node-a', shardId, registered);
      expect(reg.runningShards.map((s) => [s.shardId, s.pid])).toEqual([[shardId, pid]]);
      await until(() => allReady(second.cp), 'the adopted replica to be READY', 30_000);
      // Past the settle delay: placement has run and found nothing to do. (It was a full delay + 500 ms after
      // READY, which comes a second or more after the listen the delay counts from.)
      await sleep(Math.max(0, placedBy + 500 - Date.now()));

      expect(replica(second.cp)).toMatchObject({ phase: 'ready', url, shards: [{ shardId, adopted: true }] });
      expect(sentCommands(records, 'start')).toEqual([]);
      expect(sentCommands(records, 'stop')).toEqual([]);
      expect(processesWritingUnder(dirs.logDir)).toEqual([pid]);
      expect(await chat(url, 'tiny')).not.toBe('');
    },
    E2E_TIMEOUT_MS,
  );
});
