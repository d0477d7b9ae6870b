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

/** Where the doubles of an agent on `dirs` write the GPU memory they hold, which the fake nvidia-smi adds to its readings (fake-gpu-usage.ts). */
export const gpuUsageDir = (dirs: AgentDirs): string => join(dirs.root, 'gpu-usage');

/** The agent's environment for doubles that hold GPU memory: the fake nvidia-smi reads it from gpuUsageDir. */
export const fakeGpuUsage = (dirs: AgentDirs): Record<string, string> => ({ LLMGW_FAKE_GPU_USAGE_DIR: gpuUsageDir(dirs) });

/**
 * Starts a DoubleAgent for a file's tests (beforeAll); `supervisor`: more
 * supervisor keys (`stall_timeout: 5s`); `env`: the agent's environment,
 * from its directories (fakeGpuUsage).
 */
export async function startDoubleAgent(nodeId: string, dirPrefix: string, supervisor: string[] = [], env?: (dirs: AgentDirs) => Record<string, string>): Promise<DoubleAgent> {
  const cp = await startControlPlane();
  const dirs = agentDirs(mkdtempSync(join(tmpdir(), dirPrefix)));
  const registered = cp.cp.waitFor(nodeId, isRegister, 30_000);
  const agent = startAgentProcess({ server: cp.url, dirs, nodeId, extraYaml: DOUBLE_ENGINES_YAML, supervisor, ...(env ? { env: env(dirs) } : {}) });
  try {
    await registered;
  } catch (err) {
    // Not yet returned, so the file's afterAll cannot stop them: an agent left running would outlive the file.
    await stopDoubleAgent({ cp, agent, dirs });
    throw err;
  }
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
