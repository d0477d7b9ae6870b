import { constants, type FileHandle, open } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { describeErrno, errnoCode } from '../../lib/errno.js';
import { type Logger, silentLogger } from '../../lib/logger.js';

export interface KmsgReaderOptions {
  /** /dev/kmsg, or a FIFO or file (tests). */
  path: string;
  onLine: (line: string) => void;
  /** How often it looks for new lines. */
  pollMs?: number;
  logger?: Logger;
}

const DEFAULT_POLL_MS = 100;
const CHUNK = 64 * 1024;

/**
 * New lines of the kernel log, read without ever blocking a thread: the
 * file is opened non-blocking and read every `pollMs` until it has nothing
 * more (EAGAIN, or end of file). A blocking read of /dev/kmsg or of a FIFO
 * without a writer would hold a libuv thread until the next line, and
 * close() could not end it.
 *
 * Only lines written after start() count: a regular file is read from its
 * end at start, /dev/kmsg records older than start are skipped by their
 * timestamp (µs since boot), so a Xid from before the agent started (a GPU
 * reset since) does not fault a GPU again.
 */
export class KmsgReader {
  readonly #opts: KmsgReaderOptions;
  readonly #log: Logger;
  #fh: FileHandle | undefined;
  #position: number | null = null;
  #timer: NodeJS.Timeout | undefined;
  #reading: Promise<void> | undefined;
  #partial = '';
  #closed = false;
  #startUsec = 0;
  #warned = false;

  constructor(opts: KmsgReaderOptions) {
    this.#opts = opts;
    this.#log = opts.logger ?? silentLogger;
  }

  /** Opens the log; a log that cannot be opened is a warning (the other sources stand), and false. */
  async start(): Promise<boolean> {
    try {
      this.#fh = await open(this.#opts.path, constants.O_RDONLY | constants.O_NONBLOCK);
      const st = await this.#fh.stat();
      this.#position = st.isFile() ? st.size : null;
      this.#startUsec = uptimeUsec();
    } catch (err) {
      this.#log.warn({ path: this.#opts.path, err: describeErrno(err) }, 'kernel log unreadable: Xids only NVML reports will be seen');
      return false;
    }
    if (this.#closed) {
      await this.#fh.close();
      return false;
    }
    this.#timer = setInterval(() => {
      this.#reading ??= this.#drain().finally(() => {
        this.#reading = undefined;
      });
    }, this.#opts.pollMs ?? DEFAULT_POLL_MS).unref();
    return true;
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#timer);
    await this.#reading;
    await this.#fh?.close().catch(() => {});
    this.#fh = undefined;
  }

  async #drain(): Promise<void> {
    const fh = this.#fh;
    if (!fh) return;
    const buf = Buffer.alloc(CHUNK);
    while (!this.#closed) {
      let n: number;
      try {
        ({ bytesRead: n } = await fh.read(buf, 0, CHUNK, this.#position));
      } catch (err) {
        const code = errnoCode(err);
        // EAGAIN: nothing new. EPIPE: /dev/kmsg overwrote records before they were read; the next read resumes.
        if (code === 'EAGAIN' || code === 'EWOULDBLOCK') return;
        if (code === 'EPIPE') continue;
        if (!this.#warned) this.#log.warn({ path: this.#opts.path, err: describeErrno(err) }, 'kernel log read failed');
        this.#warned = true;
        return;
      }
      if (n === 0) return;
      if (this.#position !== null) this.#position += n;
      const lines = (this.#partial + buf.toString('utf8', 0, n)).split('\n');
      this.#partial = lines.pop() ?? '';
      for (const line of lines) if (this.#isNew(line)) this.#opts.onLine(line);
    }
  }

  #isNew(line: string): boolean {
    const m = /^\d+,\d+,(\d+),[^;]*;/.exec(line);
    return !m || Number(m[1]) >= this.#startUsec;
  }
}

function uptimeUsec(): number {
  try {
    return Math.floor(Number.parseFloat(readFileSync('/proc/uptime', 'utf8').split(' ')[0] ?? '0') * 1e6);
  } catch {
    return 0;
  }
}
