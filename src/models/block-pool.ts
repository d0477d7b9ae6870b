/**
 * A block: what one write to the file takes. 256 KiB, not a megabyte: the
 * socket's copy into a block and the write's copy out of it then stay in
 * the core's cache. With blocks of a megabyte (four held per connection,
 * eight connections) the bytes went out to memory between the two, and
 * perf showed the write's copy into the page cache at 235 ms of CPU per
 * 128 MiB where curl's took 97 ms; with 256 KiB, 15 ms, and the pull's
 * system time fell from 330 to 210 ms (issue 52, item 1).
 */
export const BLOCK_BYTES = 256 * 1024;
/**
 * Blocks given back, shared by every connection of the process: a ranged
 * pull opens a connection per 16 MiB part, and blocks of its own for each
 * (a fresh mapping, its pages faulted in by the socket's copy, unmapped
 * after) were a tenth of the pull's main thread in perf (issue 52, item 1).
 * At most POOL_BLOCKS are kept, and none once no connection has taken one
 * for POOL_IDLE_MS: an agent between pulls holds no such memory.
 */
const pool: Buffer[] = [];
const POOL_BLOCKS = 64;
const POOL_IDLE_MS = 10_000;
let lastTakenMs = 0;
let poolTimer: NodeJS.Timeout | undefined;

/**
 * A block of shared memory: the hash thread reads the bytes a connection
 * brought in it, in place, while the write copies them to the file
 * (hash-thread.ts feed), and the thread no longer reads them back.
 */
export function takeBlock(): Buffer {
  lastTakenMs = performance.now();
  return pool.pop() ?? Buffer.from(new SharedArrayBuffer(BLOCK_BYTES));
}

export function giveBlock(b: Buffer): void {
  if (pool.length >= POOL_BLOCKS) return;
  pool.push(b);
  if (poolTimer !== undefined) return;
  const look = () => {
    const idleMs = performance.now() - lastTakenMs;
    if (idleMs >= POOL_IDLE_MS) {
      pool.length = 0;
      poolTimer = undefined;
      return;
    }
    poolTimer = setTimeout(look, POOL_IDLE_MS - idleMs);
    poolTimer.unref();
  };
  poolTimer = setTimeout(look, POOL_IDLE_MS);
  poolTimer.unref();
}

/** Blocks kept for reuse now (a test's view). */
export function pooledBlocks(): number {
  return pool.length;
}
