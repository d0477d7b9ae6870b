import { freeFakeGpu } from './fake-gpus.js';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ControlPlane } from '../../src/control/control-plane.js';
import { ShardState, type ShardStatus } from '../../src/gen/llmgw/v1/agent_pb.js';
import { type AgentDirs, type AgentProcess, agentDirs, startAgentProcess } from './agent-process.js';
import { freePort, killEverything } from './engine-processes.js';
import { isRegister, shardIs, simStart } from './sim-shards.js';
import { startControlPlane } from './start-control-plane.js';

export const NODE_ID = 'node-a';

export interface CtlFixture {
  cp: ControlPlane;
  /** The control plane's address, for another agent. */
  url: string;
  dirs: AgentDirs;
  agent: AgentProcess;
  socket: string;
  /** Starts a sim shard on a GPU of its own and resolves with its pid, port and GPU once it is READY. */
  startShard(id: string, args?: string[]): Promise<{ pid: number; port: number; gpu: number }>;
  close(): Promise<void>;
}

/**
 * A control plane and a real agent process, for a file of ctl tests that
 * share them (beforeAll/afterAll): starting an agent and its engines costs
 * seconds. Its directory is 0755, so a client running as another user is
 * stopped by the socket's own permissions and nothing else.
 */
export async function startCtlFixture(opts: { heartbeat?: string; env?: Record<string, string> } = {}): Promise<CtlFixture> {
  const started = await startControlPlane();
  const root = mkdtempSync(join(tmpdir(), 'llmgw-ctl-'));
  chmodSync(root, 0o755);
  const dirs = agentDirs(root);
  // A safety net: at load 25 on 2 cores an agent took longer than 20 s to register.
  const registered = started.cp.waitFor(NODE_ID, isRegister, 60_000);
  const agent = startAgentProcess({ server: started.url, dirs, nodeId: NODE_ID, heartbeat: opts.heartbeat, env: opts.env });
  const close = async () => {
    await agent.stop();
    await killEverything(dirs.logDir);
    await started.close();
    rmSync(root, { recursive: true, force: true });
  };
  let nextGpu = 0;
  try {
    await registered;
  } catch (err) {
    await close();
    throw err;
  }
  return {
    cp: started.cp,
    url: started.url,
    dirs,
    agent,
    socket: dirs.socket,
    startShard: async (id, args) => {
      const port = await freePort();
      // Each shard its own GPU (the fake node has 8): the agent refuses a GPU another shard holds.
      const gpu = freeFakeGpu(nextGpu++);
      const settled = started.cp.waitFor(NODE_ID, shardIs(id, ShardState.READY, ShardState.FAILED), 30_000);
      started.cp.send(NODE_ID, { case: 'start', value: simStart(id, port, { args, gpu }) });
      const status = (await settled).msg.value as ShardStatus;
      if (status.state !== ShardState.READY) throw new Error(`shard ${id} failed to start: ${status.error}`);
      return { pid: status.pid, port, gpu };
    },
    close,
  };
}
