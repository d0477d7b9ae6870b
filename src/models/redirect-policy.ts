import { lookup as dnsLookup, type LookupAddress, type LookupOptions } from 'node:dns';
import { type AddressClass, type HostIdentity, hostIdentity } from './address-class.js';

/*
 * Where the hub may send a download (security reviews 3, S4, and 4, F7). A
 * hostile hub (or mirror) redirected the node's GET to its cloud's metadata
 * service and to its own loopback services, and the error told the answer's
 * length. So a redirect is judged by the class of the address it reaches,
 * whatever its spelling (address-class.ts), and a name by the addresses it
 * resolves to, judged at connect time on the addresses the socket then
 * uses (a lookup hook), so a name that resolves elsewhere a second time is
 * judged again:
 *
 * - to the host that redirected (another port of it): followed;
 * - to loopback, link-local, unspecified or special addresses: never;
 * - to a private address: only to a host listed in models.hub.redirect_hosts
 *   (an air-gapped fleet's mirror and its CDN), by name or address;
 * - to a public address: followed.
 */

/** Classes no redirect from another host reaches, whatever is listed. */
const NEVER: ReadonlySet<AddressClass> = new Set(['loopback', 'link-local', 'unspecified', 'special']);

/** Hosts of models.hub.redirect_hosts as identities: what a redirect to a private address must be one of. */
export function listedHosts(hosts: readonly string[]): ReadonlySet<string> {
  return new Set(hosts.map((h) => hostIdentity(h).key));
}

/** Why a redirect to `target` (shown as `shown`) from `from` is not followed, or undefined. `name`: the name it was reached by, when a lookup gave the address. */
function refuseTarget(from: HostIdentity, target: HostIdentity, shown: string, listed: ReadonlySet<string>, name?: string): string | undefined {
  if (target.key === from.key) return undefined;
  if (NEVER.has(target.cls)) return `the hub redirected to an internal address (${shown}), which is never followed`;
  if (target.cls === 'private' && !listed.has(target.key) && !(name !== undefined && listed.has(name))) {
    return `the hub redirected to an internal address (${shown}) that models.hub.redirect_hosts does not list; list it there if it is your mirror's`;
  }
  return undefined;
}

/**
 * Why a redirect from `from` (the URL that answered with it) to `next` is
 * not followed, or undefined: never from https to http, and by address class
 * as above. A name is judged here only as localhost; its addresses are
 * judged at connect time (redirectLookup).
 */
export function redirectRefusal(from: URL, next: URL, redirectHosts: readonly string[] = []): string | undefined {
  if (from.protocol === 'https:' && next.protocol !== 'https:') return `the hub redirected from https to ${next.protocol}//${next.host}`;
  return refuseTarget(hostIdentity(from.hostname), hostIdentity(next.hostname), next.host, listedHosts(redirectHosts));
}

/** Loopback, link-local, private, unspecified and special addresses, and localhost names, in any spelling. */
export function isInternalHost(hostname: string): boolean {
  const cls = hostIdentity(hostname).cls;
  return cls !== 'public' && cls !== 'name';
}

/**
 * The same judgement, before a request that cannot take a lookup hook
 * (fetch, for a chunked answer: fetch-stream.ts): resolves `to`'s name once
 * and judges its addresses. Unlike the hook, fetch resolves the name again,
 * so a name that answers differently the second time is not caught here.
 */
export async function judgeRedirectTarget(from: URL, to: URL, redirectHosts: readonly string[]): Promise<string | undefined> {
  if (to.origin === from.origin) return undefined;
  const textual = redirectRefusal(from, to, redirectHosts);
  if (textual !== undefined || hostIdentity(to.hostname).cls !== 'name') return textual;
  const lookup = redirectLookup(from, to.hostname, redirectHosts);
  return new Promise((resolve) => lookup(to.hostname, { all: true }, (err) => resolve(err ? err.message : undefined)));
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/**
 * A `lookup` for the socket of a redirect to a name: resolves it as net
 * would, then refuses the connection when any address it gave is one the
 * redirect may not reach (a name with one public and one loopback address
 * could be tried on either).
 */
export function redirectLookup(from: URL, name: string, redirectHosts: readonly string[]) {
  const origin = hostIdentity(from.hostname);
  const listed = listedHosts(redirectHosts);
  const nameKey = hostIdentity(name).key;
  return (hostname: string, options: LookupOptions, callback: LookupCallback): void => {
    dnsLookup(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return callback(err, []);
      for (const a of addresses) {
        const why = refuseTarget(origin, hostIdentity(a.address), `${name} at ${a.address}`, listed, nameKey);
        // No errno code: the pull's error quotes the message (describeFetchError).
        if (why) return callback(new Error(why), []);
      }
      if (options.all) return callback(null, addresses);
      const first = addresses[0];
      if (!first) return callback(Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' }), []);
      callback(null, first.address, first.family);
    });
  };
}
