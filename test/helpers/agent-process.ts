import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa, type ResultPromise } from 'execa';
import { onTestFinished } from 'vitest';
import { killEverything } from './engine-processes.js';
import { BIN } from './run-cli.js';
import { type AgentDirs, type AgentProcessOptions, agentConfigYaml } from './agent-config-yaml.js';

export { FAKE_NVIDIA_SMI, FIXTURE_SYSFS, type AgentDirs, agentDirs, type AgentProcessOptions, agentConfigYaml } from './agent-config-yaml.js';

export interface AgentProcess {
  pid: number;
  configPath: string;
  startedAtMs: number;
  /** Parsed JSON log records written so far. */
  logs(): Record<string, unknown>[];
  /** Resolves with the exit code (or signal) once the process has exited. */
  exited: Promise<{ exitCode: number | undefined; signal: string | undefined; atMs: number }>;
  kill(signal?: NodeJS.Signals): void;
}

/**
 * Starts the real `llmgw agent run` as systemd would, with JSON logs on
 * stderr. The agent and every engine under the test's log directory are
 * killed when the test finishes, pass or fail.
 */
export function startAgentProcess(o: AgentProcessOptions): AgentProcess {
  mkdirSync(o.dirs.root, { recursive: true });
  const configPath = join(o.dirs.root, `${o.nodeId ?? 'node-a'}.yaml`);
  writeFileSync(configPath, agentConfigYaml(o));
  const startedAtMs = Date.now();
  const child: ResultPromise = execa(process.execPath, [BIN, 'agent', 'run', '--config', configPath], {
    reject: false,
    stdin: 'ignore',
    env: { LLMGW_FAKE_GPUS: 'hgx-h100x8', ...o.env },
    buffer: false,
  });
  const records: Record<string, unknown>[] = [];
  let partial = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    partial += chunk.toString();
    const lines = partial.split('\n');
    partial = lines.pop() ?? '';
    for (const line of lines) {
      try {
        records.push(JSON.parse(line));
      } catch {
        records.push({ msg: line });
      }
    }
  });
  const exited = child.then((r) => ({ exitCode: r.exitCode, signal: r.signal, atMs: Date.now() }));
  onTestFinished(async () => {
    child.kill('SIGKILL');
    await exited;
  });
  return {
    pid: child.pid as number,
    configPath,
    startedAtMs,
    logs: () => records,
    exited,
    kill: (signal = 'SIGTERM') => {
      child.kill(signal);
    },
  };
}

/** Registers cleanup of every engine started under `dirs`, whatever the test's outcome. */
export function cleanUpEnginesAfterTest(dirs: AgentDirs): void {
  onTestFinished(() => killEverything(dirs.logDir));
}
