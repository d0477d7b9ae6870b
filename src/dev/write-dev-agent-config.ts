import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { usageError } from '../lib/errors.js';
import { devAgentConfigYaml } from './dev-agent-config-yaml.js';
import type { GpuSource } from './find-gpu-source.js';

/** What `llmgw dev agent-config` wrote: everything of one agent, under one directory. */
export interface DevAgentConfigFiles {
  nodeId: string;
  config: string;
  stateDir: string;
  logDir: string;
  socket: string;
  gpus: 'real' | 'fake';
}

/** A node id is sent to the control plane and shown everywhere; the same character rules as shard ids keep it printable. */
const NODE_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/**
 * The configuration of one of several agents on one machine (docs/local-cluster.md's
 * multi-agent recipe), the same as `dev up`'s agent but with its own node
 * id and its own state, log and socket paths under `dir`: two agents that
 * share a state directory would adopt each other's engines. Paths are
 * absolute, so the agent can be started from anywhere.
 */
export function writeDevAgentConfig(opts: { nodeId: string; server: string; dir: string; gpus: GpuSource; logLevel?: string }): DevAgentConfigFiles {
  if (!NODE_ID.test(opts.nodeId)) {
    throw usageError(`--node-id ${JSON.stringify(opts.nodeId)}: use 1-128 characters of A-Z a-z 0-9 . _ - starting with a letter or digit`);
  }
  const dir = resolve(opts.dir);
  const files = {
    nodeId: opts.nodeId,
    config: join(dir, 'agent.yaml'),
    stateDir: join(dir, 'state'),
    logDir: join(dir, 'log'),
    // Short: a Unix socket path is limited to 107 bytes.
    socket: join(dir, 'agent.sock'),
    gpus: opts.gpus.kind,
  };
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const yaml = devAgentConfigYaml({
    server: opts.server,
    dirs: files,
    gpus: opts.gpus,
    logLevel: opts.logLevel ?? 'info',
    nodeId: opts.nodeId,
    generatedBy: 'llmgw dev agent-config',
  });
  // The fake's data set travels in the environment for dev up's agent; here
  // the agent is started by hand, and the fake's default is the same box.
  writeFileSync(files.config, yaml, { mode: 0o600 });
  return files;
}
