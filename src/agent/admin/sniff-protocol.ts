import type { Socket } from 'node:net';
import type { Logger } from '../../lib/logger.js';

/** How every HTTP/2 connection begins (RFC 9113 3.4); no HTTP/1.1 request line can start with it. */
const HTTP2_PREFACE_START = Buffer.from('PRI ', 'latin1');

/**
 * Reads a new connection's first bytes, enough to tell the HTTP/2 preface
 * from an HTTP/1.1 request line, and puts them back for the protocol server.
 * A connection that sends too little within silentMs is closed, as one that
 * sends nothing is.
 */
export function sniffProtocol(socket: Socket, silentMs: number, log: Logger, then: (isHttp2: boolean) => void): void {
  const silent = setTimeout(() => {
    log.debug('closed a connection that sent no request');
    socket.destroy();
  }, silentMs);
  silent.unref();
  let head: Buffer = Buffer.alloc(0);
  const onData = (chunk: Buffer) => {
    head = head.length === 0 ? chunk : Buffer.concat([head, chunk]);
    const n = Math.min(head.length, HTTP2_PREFACE_START.length);
    const isHttp2 = head.subarray(0, n).equals(HTTP2_PREFACE_START.subarray(0, n));
    // "P" or "PR" could still become either; the preface's first 4 bytes, or any mismatch, decide.
    if (isHttp2 && n < HTTP2_PREFACE_START.length) return;
    clearTimeout(silent);
    socket.off('data', onData);
    socket.off('end', onEnd);
    socket.pause();
    socket.unshift(head);
    then(isHttp2);
  };
  const onEnd = () => {
    clearTimeout(silent);
    socket.destroy();
  };
  socket.on('data', onData);
  socket.once('end', onEnd);
  socket.once('close', () => clearTimeout(silent));
}
