import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa, type ResultPromise } from 'execa';
import { onTestFinished } from 'vitest';
import { killEverything } from './engine-processes.js';
import { BIN, REPO_ROOT } from './run-cli.js';

export const FAKE_NVIDIA_SMI = join(REPO_ROOT, 'bin/fake-nvidia-smi');
export const FIXTURE_SYSFS = join(REPO_ROOT, 'fixtures/sysfs/hgx-h100x8');

export interface AgentDirs {
  root: string;
  stateDir: string;
  logDir: string;
  socket: string;
}

export function agentDirs(root: string): AgentDirs {
  return { root, stateDir: join(root, 'state'), logDir: join(root, 'log'), socket: join(root, 'agent.sock') };
}

export interface AgentProcessOptions {
  server: string;
  dirs: AgentDirs;
  nodeId?: string;
  protocol?: 'connect' | 'grpc';
  /** More YAML appended to the generated config (top-level keys not set below). */
  extraYaml?: string;
  env?: Record<string, string>;
  heartbeat?: string;
}

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

/** The config a test agent runs with: fast timers, fake GPUs, everything under `dirs`. */
export function agentConfigYaml(o: AgentProcessOptions): string {
  return [
    `node_id: ${o.nodeId ?? 'node-a'}`,
    `server: ${o.server}`,
    `protocol: ${o.protocol ?? 'connect'}`,
    `heartbeat_interval: ${o.heartbeat ?? '200ms'}`,
    'reconnect_base: 100ms',
    'reconnect_max: 1s',
    'adopt_ready_timeout: 20s',
    'mgmt_interface: lo',
    'discovery:',
    `  nvidia_smi: ${FAKE_NVIDIA_SMI}`,
    `  sysfs_root: ${FIXTURE_SYSFS}`,
    '  timeout: 5s',
    'supervisor:',
    `  state_dir: ${o.dirs.stateDir}`,
    `  log_dir: ${o.dirs.logDir}`,
    '  stop_grace: 3s',
    '  worker_settle: 1s',
    '  health_interval: 500ms',
    'admin:',
    `  socket: ${o.dirs.socket}`,
    'log_level: debug',
    o.extraYaml ?? '',
  ].join('\n');
}

/**
 * Starts the real `llmgw agent run` as systemd would, with JSON logs on
 * stderr. Inside a test, the agent is killed when the test finishes, pass or
 * fail; in beforeAll, call stop() in afterAll.
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
  const stop = async () => {
    child.kill('SIGKILL');
    await exited;
  };
  try {
    onTestFinished(stop);
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

/** Registers cleanup of every engine started under `dirs`, whatever the test's outcome. */
export function cleanUpEnginesAfterTest(dirs: AgentDirs): void {
  onTestFinished(() => killEverything(dirs.logDir));
}
