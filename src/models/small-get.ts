import { type IncomingMessage, request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { promisify } from 'node:util';
import { brotliDecompress, gunzip, inflate } from 'node:zlib';

/*
 * One GET of a small answer (the hub's description of a revision), following
 * no redirect: its caller decides which to follow.
 *
 * node:http rather than fetch: fetch's first call in a process loads undici,
 * 50 ms here and 200 ms on a loaded machine, before the first byte of a
 * pull (issue 52, item 1: the pull's profile); the agent and `models pull`
 * use fetch for nothing else on that path. What fetch did besides is kept:
 * TLS verified against Node's CA store, an answer compressed in spite of
 * `accept-encoding: identity` decompressed, its size capped.
 */

export interface SmallAnswer {
  status: number;
  /** The Location header, for a redirect. */
  location: string | undefined;
  /** The body as text, read whole; undefined when it is over `maxBytes` (before or after decompression). */
  text(maxBytes: number): Promise<string | undefined>;
  /** Drops the answer and its connection. */
  cancel(): void;
}

/** An error of the connection whose `cause` carries the errno code, as fetch's does (describeFetchError reads it). */
function connectionError(err: unknown): Error {
  return new Error(err instanceof Error ? err.message : String(err), { cause: err });
}

export function getSmall(url: URL, headers: Record<string, string>, signal: AbortSignal): Promise<SmallAnswer> {
  signal.throwIfAborted();
  const request = url.protocol === 'https:' ? httpsRequest : url.protocol === 'http:' ? httpRequest : undefined;
  if (request === undefined) return Promise.reject(new Error(`${url.protocol} is not http: or https:`));
  return new Promise((resolve, reject) => {
    // No keep-alive agent: one answer per connection, nothing left open after it.
    const req = request(url, { method: 'GET', headers, agent: false, signal }, (res) => resolve(answer(res, signal)));
    req.on('error', (err) => reject(signal.aborted ? signal.reason : connectionError(err)));
    req.end();
  });
}

function answer(res: IncomingMessage, signal: AbortSignal): SmallAnswer {
  const location = res.headers.location;
  return {
    status: res.statusCode ?? 0,
    location,
    cancel: () => res.destroy(),
    text: (maxBytes) =>
      new Promise<string | undefined>((resolve, reject) => {
        const chunks: Buffer[] = [];
        let total = 0;
        res.on('data', (c: Buffer) => {
          total += c.length;
          if (total > maxBytes) {
            res.destroy();
            resolve(undefined);
            return;
          }
          chunks.push(c);
        });
        const onAbort = () => {
          res.destroy();
          reject(signal.reason);
        };
        signal.addEventListener('abort', onAbort, { once: true });
        res.on('close', () => {
          signal.removeEventListener('abort', onAbort);
          // A promise settles once: after 'end' or a cap this changes nothing.
          if (!res.complete) reject(connectionError(new Error('the connection closed before the answer ended')));
        });
        res.on('error', (err) => reject(signal.aborted ? signal.reason : connectionError(err)));
        res.on('end', () => {
          decode(Buffer.concat(chunks), String(res.headers['content-encoding'] ?? 'identity'), maxBytes).then(resolve, (err: unknown) => reject(connectionError(err)));
        });
      }),
  };
}

const gunzipAsync = promisify(gunzip);
const inflateAsync = promisify(inflate);
const brotliAsync = promisify(brotliDecompress);

/**
 * The body decompressed as its Content-Encoding says, at most `maxBytes` of
 * it (a small gzip can hold gigabytes), off the main thread (zlib's async
 * form runs on libuv's threads): the agent's heartbeats go on meanwhile.
 */
async function decode(body: Buffer, encoding: string, maxBytes: number): Promise<string | undefined> {
  const opts = { maxOutputLength: maxBytes };
  const e = encoding.trim().toLowerCase();
  const unpack = e === 'gzip' || e === 'x-gzip' ? gunzipAsync : e === 'deflate' ? inflateAsync : e === 'br' ? brotliAsync : undefined;
  if (unpack === undefined) return body.toString('utf8');
  try {
    return (await unpack(body, opts)).toString('utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') return undefined;
    throw err;
  }
}
