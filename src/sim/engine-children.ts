/**
 * The child processes of an engine double (vLLM's multiproc workers,
 * SGLang's schedulers and detokenizer): plain Node processes in the engine's
 * own process group (not detached, as Python's multiprocessing starts them),
 * so a signal to the group reaches them as it reaches the real ones.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * How often a child looks whether its parent is gone. The real children
 * end with their parent (vLLM's death pipe, SGLang's parent-death signal);
 * without this a SIGKILLed double would leave its children running.
 */
const PARENT_POLL_MS = 200;

/** How long ending the children waits before SIGKILL. */
const CHILD_STOP_MS = 5000;

export interface ChildSpec {
  /** The line the child prints once its SIGTERM disposition is set; `{pid}` is replaced. */
  readyLine: string;
  /**
   * 'exit': SIGTERM makes it exit 0 (vLLM's worker raises SystemExit);
   * 'default': no handler, SIGTERM kills it (SGLang's schedulers).
   */
  onSigterm: 'exit' | 'default';
}

export interface ChildExit {
  child: ChildProcess;
  code: number | null;
  signal: NodeJS.Signals | null;
  /** The engine was ending its children itself when this one exited (not a failure to watch for). */
  expected: boolean;
}

export class EngineChildren {
  readonly #children: ChildProcess[] = [];
  readonly #exits: ChildExit[] = [];
  #expected = false;

  /** Starts `count` children; `onExit` hears of each one's exit unless the engine is ending them itself. */
  constructor(specs: readonly ChildSpec[], onExit: (exit: ChildExit) => void) {
    for (const spec of specs) {
      const sigterm = spec.onSigterm === 'exit' ? "process.on('SIGTERM',()=>process.exit(0));" : '';
      const script =
        `${sigterm}const parent=process.ppid;` +
        `setInterval(()=>{if(process.ppid!==parent)process.kill(process.pid,'SIGKILL')},${PARENT_POLL_MS});` +
        // A line a full log disk refuses is dropped, as in engine-log.ts.
        `try{require('fs').writeSync(1,${JSON.stringify(spec.readyLine)}.replace('{pid}',String(process.pid))+'\\n')}catch{}`;
      const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'inherit', 'inherit'] });
      child.on('error', () => {});
      child.on('exit', (code, signal) => {
        const exit = { child, code, signal, expected: this.#expected };
        this.#exits.push(exit);
        if (!exit.expected) onExit(exit);
      });
      this.#children.push(child);
    }
  }

  get pids(): number[] {
    return this.#children.map((c) => c.pid as number);
  }

  /** Children that have exited (so far), in order. */
  get exits(): readonly ChildExit[] {
    return this.#exits;
  }

  get alive(): number {
    return this.#children.filter((c) => c.exitCode === null && c.signalCode === null).length;
  }

  /** From now on exits are the engine's own doing, not news. */
  expectExits(): void {
    this.#expected = true;
  }

  /** SIGTERM to every live child, then waits up to `waitMs` (SIGKILL after that); resolves when all are gone. */
  async terminate(waitMs = CHILD_STOP_MS): Promise<void> {
    this.#expected = true;
    for (const c of this.#children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGTERM');
    const deadline = Date.now() + waitMs;
    while (this.alive > 0 && Date.now() < deadline) await sleep(20);
    this.kill();
    while (this.alive > 0) await sleep(20);
  }

  /** SIGKILL to every live child, at once. */
  kill(): void {
    this.#expected = true;
    for (const c of this.#children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  }
}
