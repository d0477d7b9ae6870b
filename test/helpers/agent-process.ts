import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnAgentProcess } from './spawn-agent-process.js';
import { onTestFinished } from 'vitest';
import type { OnTestEnd } from './start-control-plane.js';
import { killEverything, removeDir } from './engine-processes.js';
import { NftPortGuard } from '../../src/lib/net/nft-port-guard.js';
import { type AgentDirs, type AgentProcessOptions, agentConfigYaml, agentDirs } from './agent-config-yaml.js';

export { type AgentDirs, type AgentProcessOptions, agentDirs, agentConfigYaml, FAKE_NVIDIA_SMI, FIXTURE_SYSFS } from './agent-config-yaml.js';

export interface AgentProcess {
  pid: number;
  configPath: string;
  startedAtMs: number;
  /** Parsed JSON log records written so far. */
  logs(): Record<string, unknown>[];
  /** Resolves with the exit code (or signal) once the process has exited. */
  exited: Promise<{ exitCode: number | undefined; signal: string | undefined; atMs: number }>;
  kill(signal?: NodeJS.Signals): void;
  /** SIGKILLs the agent and waits for it; for agents started in beforeAll. */
  stop(): Promise<void>;
}

/**
 * Starts the real `llmgw agent run` as systemd would, with JSON logs on
 * stderr. Inside a test, the agent is killed when the test finishes, pass or
 * fail (`onEnd`: a concurrent test passes its context's onTestFinished); in
 * beforeAll, call stop() in afterAll.
 */
export function startAgentProcess(o: AgentProcessOptions, onEnd: OnTestEnd = onTestFinished): AgentProcess {
  mkdirSync(o.dirs.root, { recursive: true });
  const configPath = join(o.dirs.root, `${o.nodeId ?? 'node-a'}.yaml`);
  writeFileSync(configPath, agentConfigYaml(o));
  const startedAtMs = Date.now();
  const { child, records } = spawnAgentProcess(configPath, o.env);
  const exited = child.then((r) => ({ exitCode: r.exitCode, signal: r.signal, atMs: Date.now() }));
  const stop = async () => {
    child.kill('SIGKILL');
    await exited;
    await releaseSleepPorts(records);
  };
  try {
    onEnd(stop);
  } catch {
    // Started in beforeAll: the caller stops it in afterAll.
  }
  return {
    pid: child.pid as number,
    configPath,
    startedAtMs,
    logs: () => records,
    exited,
    kill: (signal = 'SIGTERM') => {
      child.kill(signal);
    },
    stop,
  };
}

/**
 * Ends a file's shared agent and control plane, then every engine under its
 * directories, and removes them: a file's afterAll, whatever its tests did
 * (each part may be missing when beforeAll failed half-way).
 */
export async function endAgentFixture(f: { agent?: AgentProcess; cp?: { close(): Promise<void> }; dirs?: AgentDirs }): Promise<void> {
  await f.agent?.stop();
  await f.cp?.close();
  if (f.dirs) {
    await killEverything(f.dirs.logDir);
    removeDir(f.dirs.root);
  }
}

/** Registers cleanup of every engine started under `dirs`, whatever the test's outcome (`onEnd`: a concurrent test's own). */
export function cleanUpEnginesAfterTest(dirs: AgentDirs, onEnd: OnTestEnd = onTestFinished): void {
  onEnd(() => killEverything(dirs.logDir));
}

/**
 * Fresh agent directories for one test, under the system's temp directory:
 * when the test finishes, pass or fail, every engine under them is killed
 * and then the directory removed (left behind, each run of the suite added
 * dozens to /tmp).
 */
export function tempAgentDirs(prefix: string): AgentDirs {
  const dirs = agentDirs(mkdtempSync(join(tmpdir(), prefix)));
  onTestFinished(async () => {
    await killEverything(dirs.logDir);
    removeDir(dirs.root);
  });
  return dirs;
}

/**
 * Lifts the port guards this agent set (its log names each port): an agent
 * killed with its engines never lifts them itself, and every test run left
 * dozens of random ports refused to non-root users on the machine.
 */
async function releaseSleepPorts(records: Record<string, unknown>[]): Promise<void> {
  const ports = new Set(records.filter((r) => typeof r.msg === 'string' && r.msg.startsWith("sleep mode: the engine's port is refused")).map((r) => r.port));
  if (ports.size === 0) return;
  const guard = new NftPortGuard();
  for (const port of ports) if (typeof port === 'number') await guard.release(port).catch(() => undefined);
}
