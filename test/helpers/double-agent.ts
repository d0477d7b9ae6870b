import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type AgentDirs, type AgentProcess, agentDirs, startAgentProcess } from './agent-process.js';
import { DOUBLE_ENGINES_YAML } from './double-shards.js';
import { killEverything, removeDir } from './engine-processes.js';
import { isRegister } from './sim-shards.js';
import { type StartedControlPlane, startControlPlane } from './start-control-plane.js';

/** A control plane and one real agent registered with it, whose vllm and sglang engines are the doubles. */
export interface DoubleAgent {
  cp: StartedControlPlane;
  agent: AgentProcess;
  dirs: AgentDirs;
}

/** Starts a DoubleAgent for a file's tests (beforeAll); `supervisor`: more supervisor keys (`stall_timeout: 5s`). */
export async function startDoubleAgent(nodeId: string, dirPrefix: string, supervisor: string[] = []): Promise<DoubleAgent> {
  const cp = await startControlPlane();
  const dirs = agentDirs(mkdtempSync(join(tmpdir(), dirPrefix)));
  const registered = cp.cp.waitFor(nodeId, isRegister, 30_000);
  const agent = startAgentProcess({ server: cp.url, dirs, nodeId, extraYaml: DOUBLE_ENGINES_YAML, supervisor });
  await registered;
  return { cp, agent, dirs };
}

/** Ends what startDoubleAgent started (afterAll), as much of it as there is: the agent, the control plane, every engine, the files. */
export async function stopDoubleAgent(d: Partial<DoubleAgent>): Promise<void> {
  await d.agent?.stop();
  await d.cp?.close();
  if (d.dirs) {
    await killEverything(d.dirs.logDir);
    removeDir(d.dirs.root);
  }
}
