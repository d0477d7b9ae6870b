import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { onTestFinished } from 'vitest';
import type { Deployment } from '../../src/control/deployment.js';
import { type AgentMessage, ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import { type AgentDirs, type AgentProcess, agentDirs, cleanUpEnginesAfterTest, startAgentProcess } from './agent-process.js';
import { DOUBLE_ENGINES_YAML } from './double-shards.js';
import { runCli } from './run-cli.js';
import { until } from './engine-processes.js';
import { type HoldableRelay, startHoldableRelay } from './holdable-relay.js';
import { fillListenQueue as fillQueue } from './listen-queue.js';
import { type OnTestEnd, type StartedControlPlane, startControlPlane } from './start-control-plane.js';

/*
 * Two real agents on this machine (own node ids, state dirs, sockets) and
 * the reference control plane, running one two-node replica named `gang`
 * (its ranks gang-0-g1-r0 on node-a, gang-0-g1-r1 on node-b): the gang
 * tests' cluster (test/e2e/gang-*.test.ts). Everything it starts ends with
 * the test, pass or fail.
 */

export type GangNode = 'node-a' | 'node-b';
export const RANK_SHARD: Record<GangNode, string> = { 'node-a': 'gang-0-g1-r0', 'node-b': 'gang-0-g1-r1' };

export interface GangCluster {
  cp: StartedControlPlane;
  agents: Record<GangNode, AgentProcess>;
  dirs: Record<GangNode, AgentDirs>;
  /** Pid of each rank's engine, once READY. */
  pids: Record<GangNode, number>;
  /** Starts that node's agent again with the same configuration (after the test stopped it): an agent restart. */
  startAgent(node: GangNode): AgentProcess;
  /** The relay between GangClusterOptions.heldLink's agent and the control plane. */
  link?: HoldableRelay;
}

export interface GangClusterOptions {
  deployment: Deployment;
  /** Each agent serves its gang endpoint (gang_addr), which its peers ask; unset, peers watch rank 0's port alone. */
  gangAddr: boolean;
  /** The agents run the vLLM and SGLang doubles for the real engines. */
  doubles?: boolean;
  supervisor?: string[];
  readyTimeoutMs?: number;
  /** Each node's gang endpoint on this fixed port of 127.0.0.1 (one a restarted agent binds again), not a free one. */
  gangPorts?: Record<GangNode, number>;
  /** This node's agent reaches the control plane through a relay the test can hold (GangCluster.link); its peers reach it directly. */
  heldLink?: GangNode;
  /** Both agents' gang_agent_grace (10s when unset). */
  agentGrace?: string;
  /** Where the cluster's end goes: onTestFinished by default; a concurrent test's context's own (vitest tracks no concurrent test in its globals). */
  onEnd?: OnTestEnd;
}

export const shardOf = (m: AgentMessage) => (m.msg.case === 'shard' ? m.msg.value : undefined);
export const isState = (id: string, state: ShardState) => (m: AgentMessage) => shardOf(m)?.shardId === id && shardOf(m)?.state === state;

export async function startGangCluster(o: GangClusterOptions): Promise<GangCluster> {
  const first = 24_000 + Math.floor(Math.random() * 300) * 20;
  const onEnd = o.onEnd ?? onTestFinished;
  const cp = await startControlPlane({ deployment: o.deployment, retryBackoffMs: 1_000, maxRetryBackoffMs: 2_000, portRange: [first, first + 19], onEnd });
  const root = mkdtempSync(join(tmpdir(), 'llmgw-gang-'));
  onEnd(() => rmSync(root, { recursive: true, force: true }));
  const dirs = { 'node-a': agentDirs(join(root, 'a')), 'node-b': agentDirs(join(root, 'b')) };
  for (const d of Object.values(dirs)) cleanUpEnginesAfterTest(d, onEnd);
  const waitMs = o.readyTimeoutMs ?? 60_000;
  const ready = {
    'node-a': cp.cp.waitFor('node-a', isState(RANK_SHARD['node-a'], ShardState.READY), waitMs),
    'node-b': cp.cp.waitFor('node-b', isState(RANK_SHARD['node-b'], ShardState.READY), waitMs),
  };
  const extraYaml = (nodeId: GangNode) =>
    `${o.doubles ? DOUBLE_ENGINES_YAML : ''}${o.gangAddr ? `gang_addr: 127.0.0.1:${o.gangPorts?.[nodeId] ?? 0}\n` : ''}${o.agentGrace ? `gang_agent_grace: ${o.agentGrace}\n` : ''}`;
  const link = o.heldLink ? await startHoldableRelay(cp.port, onEnd) : undefined;
  const server = (nodeId: GangNode) => (link && nodeId === o.heldLink ? cp.url.replace(`:${cp.port}`, `:${link.port}`) : cp.url);
  const agent = (nodeId: GangNode) => startAgentProcess({ server: server(nodeId), dirs: dirs[nodeId], nodeId, heartbeat: '500ms', extraYaml: extraYaml(nodeId), supervisor: o.supervisor }, onEnd);
  const agents = { 'node-a': agent('node-a'), 'node-b': agent('node-b') };
  const c: GangCluster = { cp, agents, dirs, pids: { 'node-a': 0, 'node-b': 0 }, startAgent: agent, ...(link ? { link } : {}) };
  // A gang that breaks while starting fails the start at once, saying how, rather than at the timeout.
  let starting = true;
  const broke = (async () => {
    while (starting && gangTrouble(c).length === 0) await new Promise((r) => setTimeout(r, 500));
    if (starting) throw new Error(`the gang broke while starting: ${gangTrouble(c).join('; ')}`);
  })();
  try {
    const [a, b] = await Promise.race([Promise.all([ready['node-a'], ready['node-b']]), broke.then(() => [] as never)]);
    c.pids = { 'node-a': (shardOf(a) as { pid: number }).pid, 'node-b': (shardOf(b) as { pid: number }).pid };
  } catch (err) {
    // A start that timed out says what each node had reached and what its engine last wrote, not only which wait ran out.
    const tail = (node: GangNode) => rankLog(c, node).split('\n').slice(-8).join('\n    ');
    const seen = (node: GangNode) => `${node}: ${shardHistory(c, node) || 'no shard report'}\n    ${tail(node)}`;
    throw new Error(`${(err as Error).message}\n${seen('node-a')}\n${seen('node-b')}`);
  } finally {
    starting = false;
  }
  return c;
}

/** The rank's engine log as the agent wrote it so far. */
export function rankLog(c: GangCluster, node: GangNode): string {
  try {
    return readFileSync(join(c.dirs[node].logDir, 'shards', `${RANK_SHARD[node]}.log`), 'utf8');
  } catch {
    return '';
  }
}

/** Waits for a line of the rank's engine log and returns the first match. */
export async function rankLogMatch(c: GangCluster, node: GangNode, re: RegExp, timeoutMs = 30_000): Promise<RegExpExecArray> {
  await until(() => re.test(rankLog(c, node)), `${node}'s engine log to match ${re}`, timeoutMs);
  return re.exec(rankLog(c, node)) as RegExpExecArray;
}

/** What the control plane heard of the gang that says it broke, or is not READY after it was: empty for a gang left alone. */
export function gangTrouble(c: GangCluster): string[] {
  const out: string[] = [];
  for (const node of ['node-a', 'node-b'] as const) {
    let wasReady = false;
    for (const m of c.cp.cp.messages(node)) {
      const s = shardOf(m);
      if (!s?.shardId.startsWith('gang-')) continue;
      if (s.gangBreak) out.push(`${node} ${s.shardId}: gang_break ${s.gangBreak.reason}`);
      if (s.shardId !== RANK_SHARD[node]) out.push(`${node} ${s.shardId}: a later placement (${ShardState[s.state]})`);
      else if (s.state === ShardState.READY) wasReady = true;
      else if (wasReady) out.push(`${node} ${s.shardId}: ${ShardState[s.state]} ${s.error}`);
    }
  }
  return out;
}

/** Whether something accepts a TCP connection on 127.0.0.1:port within `ms`. */
export function accepts(port: number, ms = 1_000): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host: '127.0.0.1', port });
    const done = (v: boolean) => {
      clearTimeout(t);
      s.destroy();
      resolve(v);
    };
    const t = setTimeout(() => done(false), ms);
    s.once('connect', () => done(true));
    s.once('error', () => done(false));
  });
}

/** fillListenQueue (listen-queue.ts), its sockets destroyed when the test ends. */
export async function fillListenQueue(port: number): Promise<void> {
  const held: Socket[] = [];
  onTestFinished(() => {
    for (const s of held) s.destroy();
  });
  await fillQueue(port, held);
}

/** Waits `ms`, or less when the gang shows trouble first (gangTrouble), so a failing test fails early. */
export async function holdWhileWhole(c: GangCluster, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (Date.now() < end && gangTrouble(c).length === 0) await new Promise((r) => setTimeout(r, Math.min(1_000, end - Date.now())));
}

/** The node's shard reports so far, one line each, for a failure message. */
export function shardHistory(c: GangCluster, node: GangNode): string {
  return c.cp.cp
    .messages(node)
    .map(shardOf)
    .filter((s) => s !== undefined)
    .map((s) => `${s.shardId} ${ShardState[s.state]}${s.error ? ` "${s.error}"` : ''}`)
    .join(' / ');
}

/** The shard as `llmgw ctl status --json` on that node's socket shows it. */
export async function ctlShard(dirs: AgentDirs, shardId: string): Promise<{ state?: string; error?: string; gang?: string; note?: string } | undefined> {
  const r = await runCli(['ctl', 'status', '--json', '--socket', dirs.socket]);
  if (r.exitCode !== 0) return undefined;
  const shards = (JSON.parse(r.stdout) as { shards?: { shardId: string; state: string; error?: string; gang?: string; note?: string }[] }).shards ?? [];
  return shards.find((s) => s.shardId === shardId);
}
