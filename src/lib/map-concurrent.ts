/**
 * `fn` of each item, at most `limit` at once, the results in the items'
 * order. For chains of small file calls (a stat per blob): one after the
 * other each waits a round trip through libuv's threads and the event loop,
 * a millisecond or more on a loaded host; side by side they share it. The
 * limit keeps a model of thousands of files from queueing thousands of
 * calls ahead of the rest of the process's file work. The first rejection
 * rejects the whole once the calls started have settled, so none runs on
 * unseen.
 */
export async function mapConcurrent<T, R>(items: readonly T[], limit: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  if (!(Number.isSafeInteger(limit) && limit > 0)) throw new RangeError(`limit must be a positive integer, not ${limit}`);
  const out = new Array<R>(items.length);
  let next = 0;
  let failed = false;
  let firstError: unknown;
  const lane = async () => {
    while (!failed && next < items.length) {
      const i = next++;
      try {
        out[i] = await fn(items[i] as T, i);
      } catch (err) {
        if (!failed) firstError = err;
        failed = true;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
  if (failed) throw firstError;
  return out;
}

/** How many small file calls a scan keeps in flight: libuv's four threads, twice over so that none waits idle for the event loop. */
export const FILE_CALLS_AT_ONCE = 8;
