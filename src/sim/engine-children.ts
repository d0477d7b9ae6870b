/**
 * The child processes of an engine double (vLLM's multiproc workers,
 * SGLang's schedulers and detokenizer): small shell processes in the engine's
 * own process group (not detached, as Python's multiprocessing starts them),
 * so a signal to the group reaches them as it reaches the real ones. A shell,
 * not Node: each Node child cost 0.13-0.16 s of CPU to start on the test
 * machine (a TP=2 vLLM double or an SGLang one starts two or three), where
 * /bin/sh costs a millisecond or two, and what a child does is this little.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * The real children end with their parent (vLLM's death pipe, SGLang's
 * parent-death signal); without that a SIGKILLed double would leave its
 * children running. Here a death pipe, as vLLM's: the child blocks reading
 * its stdin, a pipe whose other end only the double holds (Node opens it
 * close-on-exec, so no other process inherits it). Whenever the double ends,
 * SIGKILLed or not, the kernel closes that end, the read ends, and the child
 * SIGKILLs itself, at once and with no polling.
 */
function childScript(spec: ChildSpec): string {
  // In dash and bash a trapped SIGTERM interrupts the blocked read, and the trap runs.
  const sigterm = spec.onSigterm === 'exit' ? "trap 'exit 0' TERM; " : '';
  // {pid} becomes the shell's $$; the rest is quoted, as data. A line a full log disk refuses is dropped (2>/dev/null), as in engine-log.ts.
  const line = spec.readyLine.split('{pid}').map(shellQuote).join('"$$"');
  return `${sigterm}printf '%s\\n' ${line} 2>/dev/null; read -r _; kill -KILL $$`;
}

/**
 * The Node child the doubles had before (see `nodeChildren`): it prints the
 * same line, and polls every 200 ms for its parent's death instead of a pipe.
 */
function nodeChildScript(spec: ChildSpec): string {
  const sigterm = spec.onSigterm === 'exit' ? "process.on('SIGTERM',()=>process.exit(0));" : '';
  return (
    `${sigterm}const parent=process.ppid;` +
    "setInterval(()=>{if(process.ppid!==parent)process.kill(process.pid,'SIGKILL')},200);" +
    `try{require('fs').writeSync(1,${JSON.stringify(spec.readyLine)}.replace('{pid}',String(process.pid))+'\\n')}catch{}`
  );
}

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

  /**
   * Starts `count` children; `onExit` hears of each one's exit unless the engine is ending them itself.
   * `nodeChildren`: Node processes, as before the shell ones (the vLLM double, for now: three tests of
   * test/sim/fake-vllm.test.ts wait for its workers' ready lines alone and then use its port, which a
   * Node worker's slow start always left time to open, and a shell's does not; the real workers are
   * ready long before the port, so those tests are the ones to change).
   */
  constructor(specs: readonly ChildSpec[], onExit: (exit: ChildExit) => void, opts: { nodeChildren?: boolean } = {}) {
    for (const spec of specs) {
      const child = opts.nodeChildren
        ? spawn(process.execPath, ['-e', nodeChildScript(spec)], { stdio: ['ignore', 'inherit', 'inherit'] })
        : spawn('/bin/sh', ['-c', childScript(spec)], { stdio: ['pipe', 'inherit', 'inherit'] });
      child.on('error', () => {});
      child.stdin?.on('error', () => {});
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

/** `s` as one shell word. */
function shellQuote(s: string): string {
  return `'${s.replace(/'/g, "'\\''")}'`;
}
