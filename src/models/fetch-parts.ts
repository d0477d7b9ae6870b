import { failure } from '../lib/errors.js';
import { type BlobToFetch, CONNECTIONS_PER_FILE, type DownloadContext, PART_BYTES } from './blob-to-fetch.js';
import type { BlobWriter } from './blob-writer.js';
import { contentRangeIs } from './content-range.js';
import { type HubStream, openHubStream } from './hub-stream.js';

/**
 * The parts of [have, size) after the first (already answered, bytes
 * have..firstEnd), CONNECTIONS_PER_FILE at a time, each a Range request
 * written at its offset; the first failure ends the others. Only from a far
 * server: a near one sends the file in one stream (download-blob.ts).
 */
export async function fetchParts(blob: BlobToFetch, ctx: DownloadContext, writer: BlobWriter, first: HubStream, have: number, firstEnd: number): Promise<void> {
  const parts: [number, number][] = [];
  const partBytes = ctx.partBytes ?? PART_BYTES;
  for (let at = firstEnd; at < blob.size; at += partBytes) parts.push([at, Math.min(blob.size, at + partBytes)]);
  const local = new AbortController();
  const signal = AbortSignal.any([ctx.signal, local.signal]);
  let next = 0;
  const worker = async (stream?: HubStream, start = 0, end = 0) => {
    for (;;) {
      if (!stream) {
        const part = parts[next++];
        if (!part) return;
        [start, end] = part;
        stream = await openHubStream(blob.url, { headers: { ...ctx.headers, 'accept-encoding': 'identity', range: `bytes=${start}-${end - 1}` }, signal, redirectHosts: ctx.redirectHosts });
        if (stream.status !== 206 || !contentRangeIs(stream.headers.get('content-range'), start, end, blob.size)) {
          stream.cancel();
          throw failure(`${blob.path}: the hub answered a request for bytes ${start}-${end - 1} with HTTP ${stream.status} ${stream.headers.get('content-range') ?? ''}; try again`);
        }
      }
      await writer.stream(stream, start, end);
      stream = undefined;
    }
  };
  let firstErr: unknown;
  const fail = (err: unknown) => {
    firstErr ??= err;
    local.abort(err);
  };
  await Promise.all([worker(first, have, firstEnd).catch(fail), ...Array.from({ length: CONNECTIONS_PER_FILE - 1 }, () => worker().catch(fail))]);
  if (firstErr !== undefined) throw firstErr;
}
