import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { errnoCode } from '../lib/errors.js';

/** This package's binary: from dist/dev/ (or src/dev/ under tests) up two levels. */
export const LLMGW_BIN = fileURLToPath(new URL('../../bin/run.js', import.meta.url));
/** The vLLM double this package ships: `llmgw dev up --engine vllm` runs it as the node's vllm engine. */
export const FAKE_VLLM_BIN = fileURLToPath(new URL('../../bin/fake-vllm', import.meta.url));

/** How long the agent gets to exit after SIGTERM (it ends its stream and exits at once) before SIGKILL. */
export const AGENT_EXIT_GRACE_MS = 5_000;

export interface AgentExit {
  exitCode: number | null;
  signal: NodeJS.Signals | null;
}

export interface DevAgentProcess {
  pid: number;
  exited: Promise<AgentExit>;
  /** Set once the process has exited (and been reaped). */
  exit: AgentExit | undefined;
  /** SIGTERM, AGENT_EXIT_GRACE_MS, then SIGKILL to its process group; resolves once it has exited. */
  stop(): Promise<AgentExit>;
  /** SIGKILL to its process group, synchronously (the second Ctrl-C). */
  killNow(): void;
}

/**
 * Starts `llmgw agent run --config <file>` as a child with its output
 * appended to `logPath`.
 *
 * Detached, so in its own process group: Ctrl-C in a terminal signals the
 * whole foreground group, and an agent that got it too would be gone before
 * dev up could stop the engines through it; stopping the agent is dev up's
 * decision, made after the engines are stopped.
 *
 * The environment is ours minus every LLMGW_* variable: those override the
 * agent's configuration file, and a newcomer's shell exported for a real
 * node (LLMGW_SERVER, LLMGW_SUPERVISOR_STATE_DIR) must not point the dev
 * agent at a real control plane or real state.
 */
export function spawnDevAgent(opts: { configPath: string; logPath: string; env: Record<string, string> }): DevAgentProcess {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('LLMGW_')) env[k] = v;
  Object.assign(env, { NO_COLOR: '1' }, opts.env);
  const fd = openSync(opts.logPath, 'a', 0o600);
  let child: ChildProcess;
  try {
    child = spawn(process.execPath, [LLMGW_BIN, 'agent', 'run', '--config', opts.configPath], {
      detached: true,
      stdio: ['ignore', fd, fd],
      env,
    });
  } finally {
    // The child has its own copy; ours would only keep the file open.
    closeSync(fd);
  }
  const proc: DevAgentProcess = {
    pid: child.pid ?? 0,
    exit: undefined,
    exited: new Promise<AgentExit>((resolve) => {
      child.once('exit', (exitCode, signal) => {
        proc.exit = { exitCode, signal };
        resolve(proc.exit);
      });
      // A spawn failure (the node binary gone) never fires 'exit'.
      child.once('error', () => {
        proc.exit ??= { exitCode: null, signal: null };
        resolve(proc.exit);
      });
    }),
    async stop() {
      if (proc.exit) return proc.exit;
      signalGroup('SIGTERM');
      const exited = await Promise.race([proc.exited, sleep(AGENT_EXIT_GRACE_MS).then(() => undefined)]);
      if (exited) return exited;
      signalGroup('SIGKILL');
      return proc.exited;
    },
    killNow() {
      signalGroup('SIGKILL');
    },
  };
  // Only while the child is not yet reaped: until then its pid, and so its
  // group id, cannot name another process. After, they might.
  function signalGroup(sig: NodeJS.Signals): void {
    if (proc.exit || proc.pid <= 1) return;
    try {
      process.kill(-proc.pid, sig);
    } catch (err) {
      if (errnoCode(err) !== 'ESRCH') throw err;
    }
  }
  return proc;
}
