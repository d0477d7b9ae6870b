/**
 * One child process started per turn of the event loop, whoever asks.
 *
 * Node's spawn returns only once the child has exec'd: libuv forks, then
 * blocks on a pipe until execve closes it. On a loaded machine the child
 * waits for a CPU before it gets there, and the agent's whole loop waits
 * with it: 6–43 ms a spawn measured on 2 cores at load 4 (strace, the
 * read() after clone()). The discovery rescan starts three nvidia-smi at
 * once (-L, --query-compute-apps, --version), so right after Register an
 * adopted engine's death waited for all three before its pidfd was read:
 * 67–72 ms to FAILED on the stream, 100–200 ms measured elsewhere, against
 * 23 ms at quiet moments (issue 29, bench figure 3c).
 *
 * Each caller awaits its turn before it spawns: turns are one setImmediate
 * apart, and a setImmediate queued during the check phase runs only after the
 * next poll phase, so between two spawns the loop reads what became ready
 * (a pidfd, the stream) and a death waits at most for one spawn, not for
 * every spawn asked for in the same tick.
 */
let last: Promise<void> = Promise.resolve();

export function spawnTurn(): Promise<void> {
  const turn = last.then(() => new Promise<void>((resolve) => setImmediate(resolve)));
  last = turn;
  return turn;
}
