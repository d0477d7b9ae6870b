import { hostIdentity } from './address-class.js';
import { getOnce, type HeadersAt, type HubStream } from './hub-connection.js';
import { redirectLookup, redirectRefusal } from './redirect-policy.js';

export { type HubStream, IN_PLACE_READ_BYTES } from './hub-connection.js';
export { isInternalHost, redirectRefusal } from './redirect-policy.js';

/*
 * A GET of one file from the hub over HTTP/1.1, its body read straight into
 * blocks of 256 KiB that the caller writes and hands back (body), or into
 * one buffer that every read reuses, each read consumed before the next
 * (bodyInPlace: a near server's one stream, download-blob.ts).
 *
 * Not fetch(), nor node:http: both give the body as a new buffer of at most
 * 64 KiB per socket read, and on this machine draining 128 MiB that way took
 * 500 ms of CPU and 1.2 s, where curl took 0.1 s of CPU and 0.3 s (issue 36
 * item 8: the pull moved 110 MB/s where curl moved 371). A socket given its
 * own read buffers (net's `onread`) reads the same bytes with 65 ms of CPU.
 *
 * Only what a file download needs: GET, redirects (Authorization dropped
 * when one leaves the origin, as fetch drops it), a body of Content-Length
 * bytes or up to the close. A chunked answer is reported as such
 * (`chunked`), and the caller reads it another way.
 */

/** Redirects followed (the hub sends one, to its CDN). */
export const MAX_REDIRECTS = 10;
/** A connection that brings no byte for this long (while the pull is ready for more) has failed: a hub that sends headers and nothing more held a pull for ever. */
export const IDLE_TIMEOUT_MS = 60_000;

export interface HubStreamOptions {
  headers: Record<string, string>;
  signal: AbortSignal;
  /** IDLE_TIMEOUT_MS unless a test wants less. */
  idleTimeoutMs?: number;
  /** models.hub.redirect_hosts: the private hosts a redirect may reach (redirect-policy.ts). */
  redirectHosts?: readonly string[];
  /**
   * Headers chosen once the TCP connection to the host (each host a
   * redirect leads to) is made, from its connect time: the request is
   * written then, not before (it could not go before the connect anyway).
   * A download asks a near server for the whole file and a far one for a
   * first part (download-blob.ts).
   */
  headersAt?: HeadersAt;
}

/** Follows redirects to the answer that is not one. */
export async function openHubStream(url: string, opts: HubStreamOptions): Promise<HubStream> {
  let current = new URL(url);
  let headers = { ...opts.headers };
  const redirectHosts = opts.redirectHosts ?? [];
  /** What redirected to `current`: its name's addresses are judged against it at connect; none for the hub itself. */
  let from: URL | undefined;
  for (let hops = 0; ; hops++) {
    const judged = from !== undefined && hostIdentity(current.hostname).cls === 'name' && hostIdentity(current.hostname).key !== hostIdentity(from.hostname).key;
    const lookup = judged && from ? redirectLookup(from, current.hostname, redirectHosts) : undefined;
    const res = await getOnce(current, headers, opts.signal, opts.idleTimeoutMs ?? IDLE_TIMEOUT_MS, lookup, opts.headersAt);
    const location = res.headers.get('location');
    if (![301, 302, 303, 307, 308].includes(res.status) || location === undefined) return res;
    res.cancel();
    if (hops >= MAX_REDIRECTS) throw new Error(`more than ${MAX_REDIRECTS} redirects`);
    const next = new URL(location, current);
    if (next.protocol !== 'http:' && next.protocol !== 'https:') throw new Error(`redirected to a ${next.protocol} URL`);
    // Judged against the host that redirected: a CDN the hub sent us to may not send us on to an internal address.
    const refused = redirectRefusal(current, next, redirectHosts);
    if (refused) throw new Error(refused);
    // A token for the hub is not sent to wherever it redirects (its CDN, or anyone's).
    if (next.origin !== current.origin) headers = withoutAuthorization(headers);
    from = current;
    current = next;
  }
}

function withoutAuthorization(headers: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(headers).filter(([k]) => k.toLowerCase() !== 'authorization'));
}

