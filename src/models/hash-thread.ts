import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';

/*
 * A blob's digest computed on a worker thread, from the blocks its bytes came in or from its file.
 *
 * On the main thread the sha256 of every byte (80 ms per 128 MiB here, one
 * core's 1.6 GB/s) and the read back of the parts a ranged download wrote
 * ahead of it (another copy of three quarters of the bytes) ran one after
 * the other with the socket reads and the garbage of their buffers: the
 * pull's CPU profile showed hashing and read-back as 40 % of its main
 * thread, and the pull moved 0.22–0.35x of what curl moved (issue 52, item
 * 1). Here the thread hashes the bytes in order while the main thread goes
 * on reading sockets: those that follow what it hashed without a gap from
 * the shared blocks they came in (feed), beside their write to the file,
 * and the rest (a kept prefix, parts written ahead) from the file as far as
 * the writer says it is written without a gap. The blocks fed are the ones
 * written: the digest compared before the rename is that of the bytes
 * written. Reading every byte back was a third of the thread's work.
 *
 * The thread reads through the writer's own descriptor (threads share the
 * process's descriptors): the file is opened once, O_NOFOLLOW, by the
 * writer, and the descriptor is not closed before the thread has let go of
 * it (digest() or drop() resolved), so it never reads a number the process
 * reused for another file.
 */

/**
 * The thread's code, run with `eval`: the agent is bundled into one file,
 * beside which a worker script would not be found. Its modules are taken
 * with process.getBuiltinModule, which works whether the eval runs as
 * CommonJS or, under a parent started with --input-type=module, as an ES
 * module (where require is not defined), and does not start the thread's
 * ES module loader as import() did: a sixth of the thread's start, which
 * runs beside the pull's first downloads (issue 52, item 1). import() where
 * Node has no getBuiltinModule (before 20.16); the port keeps the messages
 * that come before.
 */
const WORKER_SOURCE = `(async () => {
const builtin = (name) => (typeof process.getBuiltinModule === 'function' ? process.getBuiltinModule(name) : import(name));
const { parentPort } = await builtin('node:worker_threads');
const { createHash } = await builtin('node:crypto');
const { readSync } = await builtin('node:fs');
const buf = Buffer.allocUnsafe(${4 * 1024 * 1024});
const jobs = new Map();
parentPort.on('message', (m) => {
  if (m.op === 'open') {
    const hash = createHash(m.algo);
    if (m.prefix) hash.update(m.prefix);
    jobs.set(m.id, { hash, fd: m.fd, at: 0, error: undefined });
    return;
  }
  const j = jobs.get(m.id);
  const readTo = (end) => {
    while (j.at < end) {
      const n = readSync(j.fd, buf, 0, Math.min(buf.length, end - j.at), j.at);
      if (n === 0) throw new Error('the file ends at byte ' + j.at + ', before ' + end);
      j.hash.update(buf.subarray(0, n));
      j.at += n;
    }
  };
  if (m.op === 'to') {
    if (!j) return;
    if (j.error === undefined) {
      try {
        readTo(m.end);
      } catch (err) {
        j.error = err instanceof Error ? err.message : String(err);
      }
    }
    // How far it has hashed, for a writer that waits for it (ThreadHash.behind); -1 once it cannot go on.
    parentPort.postMessage({ hashed: m.id, at: j.error === undefined ? j.at : -1 });
    return;
  }
  if (m.op === 'mem') {
    // The bytes from m.at on, in the blocks they came in (shared memory); what lies before m.at is in the file.
    if (j && j.error === undefined) {
      try {
        readTo(m.at);
        let pos = m.at;
        for (const v of m.views) {
          const end = pos + v.length;
          if (end > j.at) j.hash.update(j.at > pos ? v.subarray(j.at - pos) : v);
          if (end > j.at) j.at = end;
          pos = end;
        }
      } catch (err) {
        j.error = err instanceof Error ? err.message : String(err);
      }
    }
    // Always answered, for a job dropped too: the blocks go back to the pool only then.
    parentPort.postMessage({ fed: m.seq });
    return;
  }
  jobs.delete(m.id);
  if (m.op === 'digest') {
    if (!j) return parentPort.postMessage({ id: m.id, error: 'no such hash' });
    if (j.error !== undefined) return parentPort.postMessage({ id: m.id, error: j.error });
    return parentPort.postMessage({ id: m.id, digest: j.hash.digest('hex'), at: j.at });
  }
  parentPort.postMessage({ id: m.id });
});
})();
`;

/**
 * Hash threads at most: one per core but the main thread's, never more than
 * four (models.max_concurrent's default: one per file pulled at once). On
 * this two-core machine one thread, beside the main thread's socket reads.
 */
export const MAX_HASH_THREADS = Math.max(1, Math.min(4, availableParallelism() - 1));
/** A thread left without work this long ends: an agent between pulls keeps no thread and its memory. */
export const HASH_THREAD_IDLE_MS = 10_000;

type Reply = { id: number; digest?: string; at?: number; error?: string; fed?: number; hashed?: number };

/**
 * A writer whose hash thread has fallen this far behind the bytes it wrote
 * waits (ThreadHash.behind) until the thread is within RESUME_HASH_LAG_BYTES.
 */
export const MAX_HASH_LAG_BYTES = 16 * 1024 * 1024;
export const RESUME_HASH_LAG_BYTES = 8 * 1024 * 1024;

interface HashThread {
  worker: Worker;
  /** Blobs being hashed on it. */
  jobs: number;
  waiting: Map<number, { resolve: (r: Reply) => void; reject: (e: unknown) => void }>;
  /** Blocks handed to it (ThreadHash.feed) and not yet hashed: called once it has. */
  feeding: Map<number, () => void>;
  /** Each open hash's listener for how far the thread has hashed it (-1: it cannot go on). */
  progress: Map<number, (at: number) => void>;
  idleTimer: NodeJS.Timeout | undefined;
  /** Ended by an error or exit: no answer will come. */
  lost: unknown;
}

const threads: HashThread[] = [];
let nextId = 1;
let nextFeed = 1;

function startThread(): HashThread {
  const t: HashThread = { worker: new Worker(WORKER_SOURCE, { eval: true }), jobs: 0, waiting: new Map(), feeding: new Map(), progress: new Map(), idleTimer: undefined, lost: undefined };
  t.worker.on('message', (r: Reply) => {
    if (r.fed !== undefined) {
      const done = t.feeding.get(r.fed);
      t.feeding.delete(r.fed);
      return done?.();
    }
    if (r.hashed !== undefined) return t.progress.get(r.hashed)?.(r.at ?? -1);
    const w = t.waiting.get(r.id);
    t.waiting.delete(r.id);
    w?.resolve(r);
  });
  const lost = (err: unknown) => {
    t.lost ??= err;
    const i = threads.indexOf(t);
    if (i >= 0) threads.splice(i, 1);
    clearTimeout(t.idleTimer);
    for (const w of t.waiting.values()) w.reject(err);
    t.waiting.clear();
    // No thread reads them any more; the digest, asked for, fails.
    for (const done of t.feeding.values()) done();
    t.feeding.clear();
    for (const hashed of t.progress.values()) hashed(-1);
    t.progress.clear();
  };
  t.worker.on('error', lost);
  t.worker.on('exit', (code) => lost(new Error(`the hash thread exited with code ${code}`)));
  threads.push(t);
  return t;
}

/** The least busy thread, a new one while fewer than MAX_HASH_THREADS are each busy. */
function pickThread(): HashThread {
  const idle = threads.find((t) => t.jobs === 0);
  if (idle) return idle;
  if (threads.length < MAX_HASH_THREADS) return startThread();
  return threads.reduce((a, b) => (b.jobs < a.jobs ? b : a));
}

/** Ends `t` once it has had no blob for HASH_THREAD_IDLE_MS. */
function armIdleEnd(t: HashThread): void {
  clearTimeout(t.idleTimer);
  t.idleTimer = setTimeout(() => {
    if (t.jobs > 0) return;
    const i = threads.indexOf(t);
    if (i >= 0) threads.splice(i, 1);
    void t.worker.terminate();
  }, HASH_THREAD_IDLE_MS);
  t.idleTimer.unref();
}

/**
 * Starts a hash thread now if none runs, for the blobs a pull is about to
 * fetch: a thread's start is 30-50 ms of CPU (a Node environment of its
 * own), which on another core runs beside the pull's set-up (its revision
 * look-up, lock and store scan) rather than after its first large blob's
 * first megabytes (issue 52, item 1). Ended as any idle thread is, after
 * HASH_THREAD_IDLE_MS without a blob.
 */
export function startHashThreadEarly(): void {
  if (threads.length > 0) return;
  const t = startThread();
  t.worker.unref();
  armIdleEnd(t);
}

/** One blob's hash on a thread: told how far the file is written, asked for the digest at the end, or dropped. */
export class ThreadHash {
  /** The digest or drop asked for: the thread's last word on this file. */
  private ending: Promise<Reply> | undefined;
  private told = 0;
  /** How far the thread has hashed, as it last said (-1: it cannot go on, nothing is to be waited for). */
  private hashedAt = 0;
  /** The thread has said how far it hashed at least once. */
  private running = false;
  /** A writer waiting in behind(): woken once hashedAt reaches resumeAt, or the hash ends. */
  private waiting: { resumeAt: number; wake: () => void; promise: Promise<void> } | undefined;

  private constructor(
    private readonly thread: HashThread,
    private readonly id: number,
  ) {}

  /**
   * Starts hashing the file open at `fd` with `algo` (after `prefix`, the
   * git blob header of a small file), from its first byte.
   */
  static open(algo: 'sha256' | 'sha1', prefix: string, fd: number): ThreadHash {
    const t = pickThread();
    clearTimeout(t.idleTimer);
    t.idleTimer = undefined;
    if (t.jobs++ === 0) t.worker.ref();
    const id = nextId++;
    t.worker.postMessage({ op: 'open', id, algo, prefix, fd });
    const h = new ThreadHash(t, id);
    t.progress.set(id, (at) => h.hashed(at));
    return h;
  }

  /**
   * A promise when the thread has hashed less than `written` minus
   * MAX_HASH_LAG_BYTES: the writer of one stream read in place waits for
   * it before the socket's next read (HubStream.bodyInPlace), so the thread
   * keeps its share of the cores while the bytes come, rather than hashing
   * most of them alone after the last one, while the other core idles. On
   * this host's two cores the hub, the reads and the thread shared them,
   * and the thread's digest came 50-110 ms after a blob's last byte
   * (bench 14b, issue 52, item 1). Undefined when no wait is needed.
   */
  behind(written: number): Promise<void> | undefined {
    // Not before the thread has said it runs: its start (a Node environment of its own) would be waited for alone.
    if (!this.running || this.ending !== undefined || this.hashedAt < 0 || written - this.hashedAt <= MAX_HASH_LAG_BYTES) return undefined;
    if (this.waiting === undefined) {
      let wake = () => {};
      const promise = new Promise<void>((resolve) => {
        wake = resolve;
      });
      this.waiting = { resumeAt: written - RESUME_HASH_LAG_BYTES, wake, promise };
    }
    return this.waiting.promise;
  }

  private hashed(at: number): void {
    this.running = true;
    this.hashedAt = at;
    if (this.waiting !== undefined && (at < 0 || at >= this.waiting.resumeAt)) this.wakeWriter();
  }

  private wakeWriter(): void {
    const w = this.waiting;
    this.waiting = undefined;
    w?.wake();
  }

  /** Bytes [0, end) of the file are written: the thread hashes up to there. */
  advance(end: number): void {
    if (this.ending !== undefined || end <= this.told) return;
    this.told = end;
    this.thread.worker.postMessage({ op: 'to', id: this.id, end });
  }

  /**
   * Hashes `chunks`, the bytes from `at` on, from memory rather than from the
   * file: blocks of shared memory (block-pool.ts), which must not be reused
   * before the promise resolves. The bytes before `at` must be in the file
   * (they are read from it first). The read back of every byte was a third
   * of the thread's work (issue 52, item 1).
   */
  feed(at: number, chunks: readonly Buffer[]): Promise<void> {
    const t = this.thread;
    if (this.ending !== undefined || t.lost !== undefined) return Promise.resolve();
    const seq = nextFeed++;
    const views = chunks.map((c) => new Uint8Array(c.buffer, c.byteOffset, c.length));
    return new Promise<void>((resolve) => {
      t.feeding.set(seq, resolve);
      t.worker.postMessage({ op: 'mem', id: this.id, seq, at, views });
    });
  }

  /** The digest of the bytes [0, end), once the thread has read them; rejects when it could not. */
  async digest(end: number): Promise<string> {
    this.advance(end);
    const r = await this.finish('digest');
    if (r.error !== undefined) throw new Error(`hashing the file: ${r.error}`);
    if (r.at !== end) throw new Error(`hashed ${r.at} of ${end} bytes`);
    return r.digest as string;
  }

  /** Lets go of the file without a digest; resolved once the thread no longer reads it, so the caller may close it. */
  async drop(): Promise<void> {
    await (this.ending ?? this.finish('drop')).catch(() => {});
  }

  private finish(op: 'digest' | 'drop'): Promise<Reply> {
    if (this.ending !== undefined) throw new Error('a hash asked for its end twice');
    const t = this.thread;
    this.wakeWriter();
    this.ending = new Promise<Reply>((resolve, reject) => {
      if (t.lost !== undefined) return reject(t.lost);
      t.waiting.set(this.id, { resolve, reject });
      t.worker.postMessage({ op, id: this.id });
    }).finally(() => {
      t.progress.delete(this.id);
      if (--t.jobs > 0 || !threads.includes(t)) return;
      t.worker.unref();
      armIdleEnd(t);
    });
    return this.ending;
  }
}
