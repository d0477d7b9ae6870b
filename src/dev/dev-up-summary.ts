import { relative } from 'node:path';
import type { ReplicaView } from '../control/replica-view.js';
import type { DevDirs } from './dev-dirs.js';
import type { GpuSource } from './find-gpu-source.js';
import { LLMGW_BIN } from './spawn-dev-agent.js';

/** What `llmgw dev up` reports once every replica is ready; `--json` prints exactly this. */
export interface DevUpSummary {
  /** The reference control plane agents connect to. */
  controlPlane: string;
  /** dataset: the fake's LLMGW_FAKE_GPUS data set; absent for real GPUs. */
  gpus: { source: 'real' | 'fake'; count: number; name: string; nvidiaSmi: string; dataset?: string };
  agent: { nodeId: string; pid: number; config: string };
  replicas: {
    id: string;
    url: string;
    /** The name to put in a request's "model". */
    model: string;
    shards: { shardId: string; nodeId: string; gpus: number[]; state: string }[];
  }[];
  /** The agent's admin socket: `llmgw ctl ... --socket <this>`. */
  socket: string;
  /** Removed on exit unless --keep. */
  tempDir: string;
  stateDir: string;
  /** The deployment that ran. */
  deployment: string;
  logs: { agent: string; controlPlane: string; engines: string };
  /** How to run this binary from where dev up was started: `node bin/run.js` in a clone, else `llmgw`. */
  cli: string;
  /** --engine vllm: the model store the vLLM double starts from (`llmgw models list --cache-dir`), and sleep is on. */
  warm?: { modelsDir: string; model: string };
}

export function buildDevUpSummary(o: {
  url: string;
  gpus: GpuSource;
  agentPid: number;
  nodeId: string;
  replicas: ReplicaView[];
  dirs: DevDirs;
  deploymentPath: string;
  /** --engine vllm: the store and model (DevUpSummary.warm). */
  warm?: { modelsDir: string; model: string };
}): DevUpSummary {
  return {
    controlPlane: o.url,
    gpus: { source: o.gpus.kind, count: o.gpus.gpuCount, name: o.gpus.gpuName, nvidiaSmi: o.gpus.nvidiaSmi, ...(o.gpus.dataset ? { dataset: o.gpus.dataset } : {}) },
    agent: { nodeId: o.nodeId, pid: o.agentPid, config: o.dirs.agentConfig },
    replicas: o.replicas.map((r) => ({
      id: r.id,
      url: r.url ?? '',
      model: r.servedModelName,
      shards: r.shards.map((s) => ({ shardId: s.shardId, nodeId: s.nodeId, gpus: s.gpuIndices, state: s.stateName })),
    })),
    socket: o.dirs.socket,
    tempDir: o.dirs.root,
    stateDir: o.dirs.stateDir,
    deployment: o.deploymentPath,
    logs: { agent: o.dirs.agentLog, controlPlane: o.dirs.controlPlaneLog, engines: `${o.dirs.logDir}/shards` },
    cli: cliInvocation(),
    ...(o.warm ? { warm: o.warm } : {}),
  };
}

/**
 * The command a newcomer can paste. From a clone (`npm start`), the binary is
 * `node bin/run.js`; `llmgw` is only on PATH after `npm link` or a global
 * install, and a command that fails on paste teaches the wrong thing.
 */
export function cliInvocation(cwd: string = process.cwd()): string {
  const rel = relative(cwd, LLMGW_BIN);
  return rel.startsWith('..') || rel.startsWith('/') ? 'llmgw' : `node ${rel}`;
}
