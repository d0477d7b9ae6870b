import { type Stats, constants, fstat, open, read, readFileSync, stat } from 'node:fs';
import type { Socket } from 'node:net';
import { promisify } from 'node:util';
import { describeErrno, errnoCode } from '../../lib/errno.js';
import { closeFd, openFdStream } from '../../lib/files/fd-stream.js';
import { type Logger, silentLogger } from '../../lib/logger.js';
import { type KmsgSource, classifyKmsgSource } from './classify-kmsg-source.js';

export interface KmsgReaderOptions {
  /** /dev/kmsg, or a FIFO or file (tests). */
  path: string;
  onLine: (line: string) => void;
  /** How often a FIFO or a file is looked at for new lines (/dev/kmsg is not polled). */
  pollMs?: number;
  logger?: Logger;
}

const DEFAULT_POLL_MS = 100;
/** After a read error other than lost records, or an end, the device is opened again this much later. */
const REOPEN_DELAY_MS = 1000;
const CHUNK = 64 * 1024;
const FLAGS = constants.O_RDONLY | constants.O_NONBLOCK;

const openFd = promisify(open);
const fstatFd = promisify(fstat);
const readFd = promisify(read);
const statPath = promisify(stat);

/** The action every "kernel log not read" warning ends with. */
const FIX_HINT = 'set discovery.kmsg to /dev/kmsg or a file';

interface Opened {
  fd: number;
  source: Exclude<KmsgSource, { kind: 'refused' }>;
  /** The file's size when opened: a regular file is read from here on. */
  size: number;
}

/** A /dev/kmsg record's prefix: priority, sequence number, µs since boot, flags. */
const RECORD_PREFIX = /^\d+,(\d+),(\d+),[^;]*;/;

/**
 * New lines of the kernel log, read without ever blocking a thread.
 *
 * /dev/kmsg (a character device) is handed to libuv as a stream, so the
 * agent's event loop wakes only when the kernel logs a record: a poll every
 * 100 ms (an fs read on the thread pool and an EAGAIN error object each
 * time) was half of the idle agent's CPU (bench figure 5b). A FIFO or a
 * regular file (tests) is opened non-blocking and read every `pollMs` until
 * it has nothing more. A blocking read would hold a libuv thread until the
 * next line, and close() could not end it.
 *
 * Only lines written after start() count: a regular file is read from its
 * end at start, /dev/kmsg records older than start are skipped by their
 * timestamp (µs since boot), so a Xid from before the agent started (a GPU
 * reset since) does not fault a GPU again. When the kernel overwrites records
 * before they are read (EPIPE), the device is opened again and the records
 * already seen are skipped by their sequence number.
 *
 * Anything else the path names (/dev/null, where containers map /dev/kmsg;
 * a directory; another device; a socket) is not read, with one warning that
 * says what it is and what to set: streaming it could abort the agent
 * (security review 2, N5; see classifyKmsgSource).
 */
export class KmsgReader {
  readonly #opts: KmsgReaderOptions;
  readonly #log: Logger;
  #fd: number | undefined;
  #socket: Socket | undefined;
  #position: number | null = null;
  #timer: NodeJS.Timeout | undefined;
  #reading: Promise<void> | undefined;
  #buf: Buffer | undefined;
  #partial = '';
  #closed = false;
  #startUsec = 0;
  #lastSeq = -1;
  #warned = false;
  /** The open warning (unreadable, or not a kernel log) is logged once, however often the device is reopened. */
  #openWarned = false;

  constructor(opts: KmsgReaderOptions) {
    this.#opts = opts;
    this.#log = opts.logger ?? silentLogger;
  }

  /**
   * Opens the log; a log that cannot be opened, or is not one (see
   * classifyKmsgSource), is a warning (the other sources stand), and false.
   */
  async start(): Promise<boolean> {
    this.#startUsec = uptimeUsec();
    const opened = await this.#open();
    if (opened === undefined) return false;
    if (this.#closed) {
      closeFd(opened.fd);
      return false;
    }
    if (opened.source.kind === 'file') this.#position = opened.size;
    await this.#follow(opened);
    return true;
  }

  /**
   * Opens the path when it is a kernel log this reader may follow; otherwise
   * logs why not, once, and gives undefined.
   *
   * The path is classified twice. Before open(), because opening a device can
   * act on it (a watchdog starts counting down, a tape rewinds), and only
   * /dev/kmsg, a FIFO or a file is ever opened. After it, by fstat of the fd,
   * because that fd is what libuv is handed: a path swapped between the two
   * (a bind mount over /dev/kmsg) must not reach epoll. Streaming anything
   * but 1:11 can abort the agent (security review 2, N5).
   */
  async #open(): Promise<Opened | undefined> {
    const path = this.#opts.path;
    try {
      const before = classifyKmsgSource(await statPath(path));
      if (before.kind === 'refused') return this.#refuse(before.what);
      const fd = await openFd(path, FLAGS);
      let st: Stats;
      try {
        st = await fstatFd(fd);
      } catch (err) {
        closeFd(fd);
        throw err;
      }
      const source = classifyKmsgSource(st);
      if (source.kind === 'refused') {
        closeFd(fd);
        return this.#refuse(source.what);
      }
      return { fd, source, size: st.size };
    } catch (err) {
      if (!this.#openWarned) this.#log.warn({ path, err: describeErrno(err) }, `kernel log unreadable: Xids only NVML reports will be seen; ${FIX_HINT}`);
      this.#openWarned = true;
      return undefined;
    }
  }

  #refuse(what: string): undefined {
    if (!this.#openWarned) this.#log.warn({ path: this.#opts.path, kind: what }, `kernel log not read: discovery.kmsg ${this.#opts.path} is ${what}, not /dev/kmsg (the character device 1:11); Xids only NVML reports will be seen; ${FIX_HINT}`);
    this.#openWarned = true;
    return undefined;
  }

  /** Streams the real device; polls a FIFO, a file, or the device when libuv cannot take it. */
  async #follow(opened: Opened): Promise<void> {
    if (opened.source.kind !== 'device') return this.#poll(opened.fd);
    if (this.#stream(opened.fd)) return;
    // openFdStream closed the fd it could not take: poll a new one.
    const again = await this.#open();
    if (again === undefined) return;
    if (this.#closed) return closeFd(again.fd);
    this.#poll(again.fd);
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#timer);
    clearTimeout(this.#timer);
    this.#socket?.destroy();
    this.#socket = undefined;
    await this.#reading;
    if (this.#fd !== undefined) closeFd(this.#fd);
    this.#fd = undefined;
  }

  /** Reads the device on the event loop; false when libuv cannot watch it (the fd is then closed). */
  #stream(fd: number): boolean {
    const opened = openFdStream(fd);
    if ('unsupported' in opened) {
      this.#log.debug({ path: this.#opts.path, reason: opened.unsupported }, 'kernel log polled');
      return false;
    }
    const socket = opened.socket;
    this.#socket = socket;
    socket.on('data', (chunk: Buffer) => this.#take(chunk.toString('utf8')));
    socket.on('error', (err) => {
      if (errnoCode(err) === 'EPIPE') return this.#reopen(0);
      if (!this.#warned) this.#log.warn({ path: this.#opts.path, err: describeErrno(err) }, 'kernel log read failed');
      this.#warned = true;
      this.#reopen(REOPEN_DELAY_MS);
    });
    socket.on('end', () => this.#reopen(REOPEN_DELAY_MS));
    return true;
  }

  /** Opens the device again after `delayMs`, once: its records up to the last seen are skipped. */
  #reopen(delayMs: number): void {
    if (this.#closed || this.#socket === undefined) return;
    this.#socket.destroy();
    this.#socket = undefined;
    this.#partial = '';
    this.#timer = setTimeout(async () => {
      // Classified again: what the path names now is what would reach epoll.
      const opened = await this.#open();
      if (opened === undefined) return;
      if (this.#closed) return closeFd(opened.fd);
      await this.#follow(opened);
    }, delayMs).unref();
  }

  #poll(fd: number): void {
    this.#fd = fd;
    this.#buf = Buffer.allocUnsafe(CHUNK);
    this.#timer = setInterval(() => {
      this.#reading ??= this.#drain().finally(() => {
        this.#reading = undefined;
      });
    }, this.#opts.pollMs ?? DEFAULT_POLL_MS).unref();
  }

  async #drain(): Promise<void> {
    const fd = this.#fd;
    const buf = this.#buf;
    if (fd === undefined || buf === undefined) return;
    while (!this.#closed) {
      let n: number;
      try {
        ({ bytesRead: n } = await readFd(fd, buf, 0, CHUNK, this.#position));
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
      this.#take(buf.toString('utf8', 0, n));
    }
  }

  #take(text: string): void {
    const lines = (this.#partial + text).split('\n');
    this.#partial = lines.pop() ?? '';
    for (const line of lines) if (this.#isNew(line)) this.#opts.onLine(line);
  }

  #isNew(line: string): boolean {
    const m = RECORD_PREFIX.exec(line);
    if (!m) return true;
    if (this.#socket) {
      // Only the device numbers its records: after a reopen, its ring is read again from the start.
      const seq = Number(m[1]);
      if (seq <= this.#lastSeq) return false;
      this.#lastSeq = seq;
    }
    return Number(m[2]) >= this.#startUsec;
  }
}

function uptimeUsec(): number {
  try {
    return Math.floor(Number.parseFloat(readFileSync('/proc/uptime', 'utf8').split(' ')[0] ?? '0') * 1e6);
  } catch {
    return 0;
  }
}
