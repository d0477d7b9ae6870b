import type { Hash } from 'node:crypto';
import { unlink } from 'node:fs/promises';
import { APPEND, WRITE_TRUNCATE, openStoreFile, truncateStoreFile } from './store-files.js';
import { failure } from '../lib/errors.js';
import { newHash } from './blob-digest.js';
import { type BlobToFetch, type DownloadContext, SMALL_BLOB_BYTES } from './blob-to-fetch.js';
import { contentRangeIs } from './content-range.js';
import { describeFetchError } from './hub-client.js';
import { judgeRedirectTarget } from './redirect-policy.js';

/**
 * The old way, through fetch, for an answer in chunks (Transfer-Encoding:
 * chunked), which no file server sends for a file of known size but a proxy
 * might: one stream, each chunk hashed and appended as it comes.
 */
export async function fetchStream(blob: BlobToFetch, ctx: DownloadContext, from: number, hashSoFar: Hash, resumedFrom: number, answeredAt: string): Promise<{ digest: string; resumedFrom: number; fetched: number }> {
  let have = from;
  let hash = hashSoFar;
  // Asked again where the first request's redirects (checked by openHubStream) ended, following none: the token only to the hub's own origin.
  const sameOrigin = new URL(answeredAt).origin === new URL(blob.url).origin;
  // openHubStream judged the redirect's addresses as it connected; fetch resolves the name again, so it is judged again.
  const refused = await judgeRedirectTarget(new URL(blob.url), new URL(answeredAt), ctx.redirectHosts ?? []);
  if (refused !== undefined) throw failure(`${blob.path}: cannot download from ${new URL(blob.url).origin}: ${refused}`);
  const headers: Record<string, string> = { ...(sameOrigin ? ctx.headers : Object.fromEntries(Object.entries(ctx.headers).filter(([k]) => k.toLowerCase() !== 'authorization'))), 'accept-encoding': 'identity' };
  if (have > 0) headers.range = `bytes=${have}-`;
  let res: Response;
  try {
    res = await fetch(answeredAt, { headers, signal: ctx.signal, redirect: 'error' });
  } catch (err) {
    ctx.signal.throwIfAborted();
    throw failure(`${blob.path}: cannot download from ${new URL(blob.url).origin}: ${describeFetchError(err)}`, { cause: err });
  }
  if (res.status === 200 && have > 0) {
    await truncateStoreFile(blob.incompletePath, 0);
    have = 0;
    hash = newHash(blob);
  } else if (res.status !== 200 && !(res.status === 206 && contentRangeIs(res.headers.get('content-range'), have, undefined, blob.size))) {
    await res.body?.cancel();
    throw failure(`${blob.path}: the hub answered HTTP ${res.status} ${res.headers.get('content-range') ?? ''}; try again`);
  }
  if (!res.body) throw failure(`${blob.path}: the hub sent no body`);
  if (blob.prefixPath !== undefined) await unlink(blob.prefixPath).catch(() => {});
  const fh = await openStoreFile(blob.incompletePath, have > 0 ? APPEND : WRITE_TRUNCATE, 0o600);
  let fetched = 0;
  try {
    for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
      if (have + chunk.byteLength > blob.size) throw failure(`${blob.path}: the hub sent more than the ${blob.size} bytes it listed`);
      await ctx.limiter.take(chunk.byteLength, ctx.signal);
      await fh.write(chunk);
      hash.update(chunk);
      have += chunk.byteLength;
      fetched += chunk.byteLength;
      ctx.onProgress?.({ bytes: have });
    }
    if (blob.size >= SMALL_BLOB_BYTES) await fh.datasync();
  } catch (err) {
    ctx.signal.throwIfAborted();
    if (err instanceof Error && err.name === 'LlmgwError') throw err;
    throw failure(`${blob.path}: the download broke off at byte ${have} of ${blob.size}: ${describeFetchError(err)}; pull again to resume`, { cause: err });
  } finally {
    await fh.close();
  }
  if (have !== blob.size) throw failure(`${blob.path}: the hub sent ${have} of ${blob.size} bytes; pull again to resume`);
  return { digest: hash.digest('hex'), resumedFrom, fetched };
}
