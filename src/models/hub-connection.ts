import { connect as netConnect, type Socket } from 'node:net';
import { type ConnectionOptions, connect as tlsConnect } from 'node:tls';
import { BLOCK_BYTES, giveBlock, takeBlock } from './block-pool.js';
import { type HttpHead, isIp, parseHttpHead, requestText } from './http-head.js';
import type { redirectLookup } from './redirect-policy.js';

/*
 * One GET on one connection (hub-stream.ts follows the redirects): the
 * socket reads through net's `onread` into blocks of the pool (body) or one
 * buffer of its own (bodyInPlace), and the head is parsed where it ends.
 */

/**
 * The one buffer a body read in place (bodyInPlace) reads into: the kernel
 * hands a loopback or LAN socket's reads of a megabyte when it has them (64
 * of 67 reads of a 64 MiB file here), a quarter of the calls of a 256 KiB
 * block; 4 MiB, out of the core's caches between the read and the hash, was
 * slower (issue 52, item 1).
 */
export const IN_PLACE_READ_BYTES = 1024 * 1024;
/** A block with less room than this is handed over rather than read into: reads stay large. */
const MIN_READ_BYTES = 64 * 1024;
/** A block partly filled is handed over after this long, so a slow link still writes (and shows progress) as it goes. */
const FLUSH_AFTER_MS = 100;
/**
 * Blocks handed over and not given back before the socket stops reading: the memory one connection may hold.
 * Eight: those being written and those the hash reads in place (blob-writer.ts feedHash), four of each.
 */
const MAX_BLOCKS_HELD = 8;
/** A response head larger than this is no file download's. */
const MAX_HEAD_BYTES = 64 * 1024;
/**
 * Headers chosen once the TCP connection is made, from its connect time: the
 * request is written then (HubStreamOptions.headersAt).
 */
export type HeadersAt = (connectMs: number | undefined, remoteAddress: string | undefined) => Record<string, string>;

/** One answer, its head read; the body is read with `body()` or dropped with `cancel()`. */
export interface HubStream extends HttpHead {
  /** The URL that answered, after redirects. */
  url: string;
  /**
   * The TCP connect's time (after the name's lookup): about one round trip
   * to the server that answered, the time of its event included.
   */
  connectMs: number | undefined;
  /**
   * Reads the body to its end, handing each filled block to `onBlock` with
   * the function that gives it back (the socket pauses while too many are
   * out). Resolves with the bytes read; rejects if the connection ends
   * before Content-Length, or on the signal.
   */
  body(onBlock: (chunk: Buffer, release: () => void) => void): Promise<number>;
  /**
   * Reads the body to its end into one buffer of IN_PLACE_READ_BYTES that
   * every socket read reuses, handing each read's bytes to `onBytes`, which
   * must be done with them when it returns (hash them, write them): no
   * block is handed over, none waits for a write, nothing crosses a thread.
   * Resolves and rejects as body() does; `onBytes` throwing ends the read
   * with its error. When it returns a promise the socket reads no more
   * until that settles (a rejection ends the read with its error): the
   * consumer's backpressure, as a hash thread fallen behind (blob-writer.ts).
   */
  bodyInPlace(onBytes: (chunk: Buffer) => void | Promise<void>): Promise<number>;
  /** Closes the connection; a body being read rejects with `reason`. */
  cancel(reason?: unknown): void;
}

/** An error of the connection, named by its errno code as fetch's cause is (describeFetchError reads it). */
function connectionError(err: unknown): Error {
  return new Error(err instanceof Error ? err.message : String(err), { cause: err });
}

export function getOnce(
  url: URL,
  headers: Record<string, string>,
  signal: AbortSignal,
  idleMs: number,
  lookup?: ReturnType<typeof redirectLookup>,
  headersAt?: HeadersAt,
): Promise<HubStream> {
  signal.throwIfAborted();
  for (const [k, v] of Object.entries(headers)) {
    if (/[\r\n]/.test(k) || /[\r\n]/.test(v)) return Promise.reject(new Error(`header ${k} holds a line break`));
  }
  return new Promise((resolveHead, rejectHead) => {
    // The socket reads into `block` from `filled` on; what lies between `from` and `filled` is not handed over yet.
    let block: Buffer = takeBlock();
    let filled = 0;
    let from = 0;
    let head: HubStream | undefined;
    let received = 0;
    let held = 0;
    let paused = false;
    let ended = false;
    let failed: unknown;
    let flushTimer: NodeJS.Timeout | undefined;
    let idleTimer: NodeJS.Timeout | undefined;
    const queued: [Buffer, () => void][] = [];
    /** Chunks of each block handed over and not given back. */
    const outOf = new Map<Buffer, number>();
    let deliver: ((chunk: Buffer, release: () => void) => void) | undefined;
    /** Set by bodyInPlace: each read's bytes go to it at once, and the socket reads into `block` from its start again. */
    let inPlace: ((chunk: Buffer) => void) | undefined;
    /** `block` is an in-place read's own buffer, not the pool's. */
    let ownBlock = false;
    let bodyDone: { resolve: (n: number) => void; reject: (e: unknown) => void } | undefined;

    const port = Number(url.port) || (url.protocol === 'https:' ? 443 : 80);
    const host = url.hostname.replace(/^\[|\]$/g, '');
    // After each read net asks for the buffer of the next: the rest of the block, or a new block once it was handed over.
    const onread = { buffer: () => block.subarray(filled), callback: (n: number) => onRead(n) };
    let connectFrom = performance.now();
    let connectMs: number | undefined;
    const socket: Socket =
      url.protocol === 'https:'
        ? // tls takes onread as net does (lib/_tls_wrap.js passes it to its socket); its types omit it.
          tlsConnect({ host, port, servername: isIp(host) ? undefined : host, ALPNProtocols: ['http/1.1'], onread, lookup } as ConnectionOptions)
        : netConnect({ host, port, onread, lookup });
    socket.once('lookup', () => {
      connectFrom = performance.now();
    });
    const request = (all: Record<string, string>) => requestText(url, all);
    socket.once('connect', () => {
      connectMs = performance.now() - connectFrom;
      if (headersAt === undefined || failed !== undefined) return;
      let chosen: Record<string, string>;
      try {
        chosen = headersAt(connectMs, socket.remoteAddress);
        for (const [k, v] of Object.entries(chosen)) if (/[\r\n]/.test(k) || /[\r\n]/.test(v)) throw new Error(`header ${k} holds a line break`);
      } catch (err) {
        return fail(err);
      }
      // tls holds it until the handshake is made.
      socket.write(request({ ...headers, ...chosen }));
    });
    // Written at once: net and tls hold it until the connection (and handshake) is made.
    if (headersAt === undefined) socket.write(request(headers));

    const onAbort = () => fail(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    /** When the connection last brought bytes (or was resumed by the pull). */
    let lastByteMs = performance.now();
    /**
     * Arms the idle limit while the connection is expected to bring bytes; not while the pull holds it paused.
     * One timer that looks at the last byte's time when it fires: re-armed at every read, its clearTimeout and
     * setTimeout were a tenth of the pull's main thread (issue 52, item 1).
     */
    const armIdle = (afterMs = idleMs) => {
      clearTimeout(idleTimer);
      idleTimer = undefined;
      if (paused || ended || failed !== undefined) return;
      idleTimer = setTimeout(() => {
        idleTimer = undefined;
        const quietMs = performance.now() - lastByteMs;
        if (quietMs >= idleMs) fail(new Error(`no byte from ${url.host} for ${idleMs / 1000}s`));
        else armIdle(idleMs - quietMs);
      }, afterMs);
      idleTimer.unref();
    };
    const touch = () => {
      lastByteMs = performance.now();
    };
    /** Reading again after a pause (blocks given back, a consumer's wait over): the idle limit counts from now. */
    const resumeReading = () => {
      paused = false;
      socket.resume();
      touch();
      armIdle();
    };
    const cleanup = () => {
      signal.removeEventListener('abort', onAbort);
      clearTimeout(flushTimer);
      flushTimer = undefined;
      clearTimeout(idleTimer);
      socket.destroy();
      // No read comes into it after the destroy; one handed over comes back with its last release. An in-place
      // read's buffer is its own, not the pool's.
      if (!ownBlock && !outOf.has(block)) giveBlock(block);
    };
    const fail = (err: unknown) => {
      if (failed !== undefined || ended) return;
      failed = err;
      cleanup();
      if (!head) rejectHead(err);
      else bodyDone?.reject(err);
    };
    const releaseOf = (b: Buffer) => {
      let released = false;
      return () => {
        // Once: a block given to the pool twice would be read into by two connections.
        if (released) return;
        released = true;
        release(b);
      };
    };
    const release = (b: Buffer) => {
      held--;
      const left = (outOf.get(b) ?? 1) - 1;
      if (left > 0) outOf.set(b, left);
      else {
        outOf.delete(b);
        // The block the socket reads into is kept, unless the connection is over (cleanup left it to this release).
        if (b !== block || ended || failed !== undefined) giveBlock(b);
      }
      if (paused && held < MAX_BLOCKS_HELD && failed === undefined && !ended) resumeReading();
    };
    /** Hands over what the block holds past `from`; the socket goes on filling the same block after it. */
    const deliverFilled = () => {
      if (filled <= from) return;
      const chunk = block.subarray(from, filled);
      from = filled;
      held++;
      outOf.set(block, (outOf.get(block) ?? 0) + 1);
      const release = releaseOf(block);
      if (deliver) deliver(chunk, release);
      else queued.push([chunk, release]);
    };
    const finish = () => {
      if (ended || failed !== undefined) return;
      deliverFilled();
      ended = true;
      cleanup();
      bodyDone?.resolve(received);
    };

    /** bodyInPlace's read: what the buffer holds goes to `consume` now, and the next read fills it from its start. */
    const readInPlace = (consume: (chunk: Buffer) => void | Promise<void>, limit: number | undefined): boolean => {
      let wait: Promise<void> | undefined;
      if (filled > from) {
        try {
          wait = consume(block.subarray(from, filled)) ?? undefined;
        } catch (err) {
          fail(err);
          return false;
        }
      }
      if (!ownBlock) {
        // The first read in place came into the last pool block: from now on the socket reads into a buffer of its
        // own, asked for when this returns (onread's buffer()).
        if (!outOf.has(block)) giveBlock(block);
        block = Buffer.allocUnsafeSlow(IN_PLACE_READ_BYTES);
        ownBlock = true;
      }
      filled = 0;
      from = 0;
      if (limit !== undefined && received >= limit) {
        finish();
        return false;
      }
      if (wait !== undefined && failed === undefined) {
        pauseUntil(wait);
        return false;
      }
      return failed === undefined;
    };
    /** The socket paused (the idle limit with it) until the in-place consumer's promise settles. */
    const pauseUntil = (wait: Promise<void>) => {
      paused = true;
      clearTimeout(idleTimer);
      idleTimer = undefined;
      wait.then(() => {
        if (paused && !ended && failed === undefined) resumeReading();
      }, fail);
    };

    const onRead = (n: number): boolean => {
      if (failed !== undefined || ended) return false;
      touch();
      const start = filled;
      filled += n;
      if (!head) {
        const at = block.subarray(0, filled).indexOf('\r\n\r\n', Math.max(0, start - 3));
        if (at < 0) {
          if (filled > MAX_HEAD_BYTES) fail(new Error(`the answer's head is over ${MAX_HEAD_BYTES} bytes`));
          return failed === undefined;
        }
        try {
          head = parseHead(block.subarray(0, at).toString('latin1'));
        } catch (err) {
          fail(err);
          return false;
        }
        from = at + 4;
        resolveHead(head);
      }
      const bodyFrom = Math.max(start, from);
      let fresh = filled - bodyFrom;
      const limit = head.contentLength;
      // Past Content-Length is not the file's (nothing should come there on a closing connection).
      if (limit !== undefined && received + fresh > limit) {
        fresh = limit - received;
        filled = bodyFrom + fresh;
      }
      received += fresh;
      if (inPlace !== undefined) return readInPlace(inPlace, limit);
      if (limit !== undefined && received >= limit) {
        finish();
        return false;
      }
      if (BLOCK_BYTES - filled < MIN_READ_BYTES) {
        deliverFilled();
        const full = block;
        block = takeBlock();
        if (!outOf.has(full)) giveBlock(full);
        filled = 0;
        from = 0;
      } else if (filled > from && flushTimer === undefined) {
        // Left running when a full block goes first (one timer per FLUSH_AFTER_MS, not one per block): what it then
        // hands over is what came since, sooner than FLUSH_AFTER_MS, a smaller write and nothing else.
        flushTimer = setTimeout(() => {
          flushTimer = undefined;
          deliverFilled();
        }, FLUSH_AFTER_MS);
      }
      if (held >= MAX_BLOCKS_HELD) {
        paused = true;
        clearTimeout(idleTimer);
        idleTimer = undefined;
        return false;
      }
      return true;
    };

    armIdle();
    socket.on('error', (err) => fail(connectionError(err)));
    // 'close', not 'end': a socket reading through onread need not emit 'end'.
    socket.on('close', () => {
      if (ended || failed !== undefined) return;
      // Without Content-Length the body is what came before the close; with it, a short body is an error.
      if (head && head.contentLength === undefined && !head.chunked) finish();
      else if (head) fail(new Error(`the connection closed after ${received} of ${head.contentLength ?? 'unknown'} bytes`));
      else fail(new Error('the connection closed before an answer'));
    });

    const parseHead = (text: string): HubStream => {
      const parsed = parseHttpHead(text);
      return {
        ...parsed,
        connectMs,
        url: url.href,
        body: (onBlock) =>
          new Promise<number>((resolve, reject) => {
            if (failed !== undefined) return reject(failed);
            deliver = onBlock;
            for (const [chunk, release] of queued.splice(0)) onBlock(chunk, release);
            if (ended) return resolve(received);
            bodyDone = { resolve, reject };
            if (head?.contentLength === 0) finish();
          }),
        bodyInPlace: (onBytes) =>
          new Promise<number>((resolve, reject) => {
            if (failed !== undefined) return reject(failed);
            if (deliver !== undefined || inPlace !== undefined) return reject(new Error('the body is read once'));
            // What came with the head or before this call, in the blocks it was read into: handed over first.
            const waits: Promise<void>[] = [];
            const waitToo = (w: void | Promise<void>) => w && waits.push(w);
            for (const [chunk, release] of queued.splice(0)) {
              try {
                waitToo(onBytes(chunk));
              } catch (err) {
                release();
                fail(err);
                return reject(err);
              }
              release();
            }
            // The block being read into still holds what came since its last hand-over.
            if (!ended && filled > from) {
              try {
                waitToo(onBytes(block.subarray(from, filled)));
              } catch (err) {
                fail(err);
                return reject(err);
              }
              from = filled;
            }
            // The consumer may have ended it (a signal aborted in it).
            if (failed !== undefined) return reject(failed);
            if (ended) return resolve(received);
            // The socket's next read still goes into this block, after `filled` (net asked for its buffer after the
            // last read): readInPlace hands it over, and only then gives the socket a buffer of its own.
            inPlace = onBytes;
            bodyDone = { resolve, reject };
            if (head?.contentLength === 0 || (head?.contentLength !== undefined && received >= head.contentLength)) finish();
            else if (waits.length > 0) {
              socket.pause();
              pauseUntil(Promise.all(waits).then(() => {}));
            } else if (paused) resumeReading();
          }),
        cancel: (reason?: unknown) => {
          if (ended || failed !== undefined) return;
          if (bodyDone) return fail(reason ?? new Error('cancelled'));
          ended = true;
          cleanup();
        },
      };
    };
  });
}
