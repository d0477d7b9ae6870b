import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Everything one `llmgw dev up` writes, under one temporary directory. */
export interface DevDirs {
  /** Made by mkdtemp (mode 0700): unique, so whatever writes under it is ours. */
  root: string;
  /** The agent's supervisor.state_dir: shards/<shard_id>.json. */
  stateDir: string;
  /** The agent's supervisor.log_dir: shards/<shard_id>.log. */
  logDir: string;
  /** The agent's admin socket, for `llmgw ctl --socket`. */
  socket: string;
  agentConfig: string;
  /** The agent's stderr (JSON log lines). */
  agentLog: string;
  controlPlaneLog: string;
  /** The generated deployment (absent from the directory when --deployment is given). */
  deployment: string;
  /** --engine vllm: the agent's model store (models.cache_dir). */
  modelsDir: string;
  /** --engine vllm: where the vLLM double writes the GPU memory it holds, for the fake nvidia-smi to read. */
  gpuUsageDir: string;
}

export function createDevDirs(parent: string = tmpdir()): DevDirs {
  const root = mkdtempSync(join(parent, 'llmgw-dev-'));
  return {
    root,
    stateDir: join(root, 'state'),
    logDir: join(root, 'log'),
    // A Unix socket path is limited to 107 bytes; directly under the temp
    // root it stays short even with a long TMPDIR.
    socket: join(root, 'agent.sock'),
    agentConfig: join(root, 'agent.yaml'),
    agentLog: join(root, 'agent.log'),
    controlPlaneLog: join(root, 'control-plane.log'),
    deployment: join(root, 'deployment.yaml'),
    modelsDir: join(root, 'models'),
    gpuUsageDir: join(root, 'gpu-usage'),
  };
}
