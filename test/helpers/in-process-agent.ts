import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Agent } from '../../src/agent/agent.js';
import type { AgentConfig } from '../../src/agent/config/agent-config.js';
import { loadAgentConfig } from '../../src/agent/config/load-agent-config.js';
import { discover } from '../../src/agent/discovery/discover.js';
import { GpuMemorySampler } from '../../src/agent/health/gpu-memory-sampler.js';
import { EngineRegistry } from '../../src/agent/engines/engine-registry.js';
import { Supervisor } from '../../src/agent/supervisor/supervisor.js';
import { silentLogger } from '../../src/lib/logger.js';
import { type AgentDirs, agentConfigYaml } from './agent-process.js';

/**
 * A real Agent in this process, assembled as runAgent does but not run: it
 * answers the admin socket from its real (empty) supervisor. For tests of the
 * admin server itself; end-to-end tests use startAgentProcess.
 */
export function createInProcessAgent(dirs: AgentDirs, nodeId = 'node-in-process'): { agent: Agent; config: AgentConfig; close(): void } {
  mkdirSync(dirs.root, { recursive: true });
  const configPath = join(dirs.root, `${nodeId}.yaml`);
  // Nothing listens on port 1: the agent is never run, so it never dials.
  writeFileSync(configPath, agentConfigYaml({ server: 'http://127.0.0.1:1', dirs, nodeId }));
  const config = loadAgentConfig({ configPath, env: {} }).config;
  const supervisor = new Supervisor({ config: config.supervisor });
  const agent = new Agent({
    config,
    version: 'test',
    logger: silentLogger,
    supervisor,
    engines: new EngineRegistry({ engines: config.engines, mgmtInterface: config.mgmtInterface }),
    sampler: new GpuMemorySampler({ nvidiaSmi: config.discovery.nvidiaSmi, intervalMs: config.heartbeatIntervalMs, timeoutMs: config.discovery.timeoutMs, logger: silentLogger }),
    discover: (signal) =>
      discover({
        nvidiaSmi: config.discovery.nvidiaSmi,
        sysfsRoot: config.discovery.sysfsRoot,
        timeoutMs: config.discovery.timeoutMs,
        fabrics: config.fabrics,
        signal,
        logger: silentLogger,
      }),
  });
  return { agent, config, close: () => supervisor.close() };
}
