import { isIPv4, isIPv6 } from 'node:net';

/*
 * What kind of address a host is, whatever its spelling (security review 4,
 * F7): the URL parser writes [::ffff:127.0.0.1] as [::ffff:7f00:1], and an
 * address has more spellings still (2130706433, 0177.0.0.1, 0x7f.1,
 * [::127.0.0.1], [64:ff9b::7f00:1], "127.0.0.1."). Each is read to its
 * bytes first, and the class judged from the bytes, never from the text.
 */

/**
 * - loopback: 127/8, ::1, localhost and *.localhost (RFC 6761)
 * - link-local: 169.254/16 (the cloud metadata service), fe80::/10
 * - unspecified: 0/8 and ::, which Linux connects to this host
 * - special: multicast, broadcast and reserved ranges, nothing a file is on
 * - private: 10/8, 172.16/12, 192.168/16, 100.64/10 (carrier NAT), fc00::/7, fec0::/10
 * - public: any other address
 * - name: a name other than localhost, whose addresses only a lookup tells
 */
export type AddressClass = 'loopback' | 'link-local' | 'unspecified' | 'special' | 'private' | 'public' | 'name';

/** A host as a connection reaches it: an address in one canonical spelling, or a name in lower case without its trailing dots. */
export interface HostIdentity {
  /** The dotted IPv4 address (also of an IPv6 address that carries one: mapped, compatible, NAT64), the IPv6 address's 8 groups in hex, or the name. */
  key: string;
  cls: AddressClass;
}

/** One IPv4 part as inet_aton reads it: decimal, 0x hex, or octal with a leading 0. */
function ipv4Part(text: string): number | undefined {
  if (/^0x[0-9a-f]*$/i.test(text)) return text.length === 2 ? 0 : Number.parseInt(text.slice(2), 16);
  if (/^0[0-7]*$/.test(text)) return Number.parseInt(text, 8);
  if (/^[1-9][0-9]*$/.test(text)) return Number(text);
  return undefined;
}

/** An IPv4 address in any of inet_aton's spellings (1 to 4 parts, the last filling the bytes left), as a 32-bit number. */
export function parseIPv4(text: string): number | undefined {
  const parts = text.split('.');
  if (parts.length > 4 || parts.some((p) => p === '')) return undefined;
  const nums = parts.map(ipv4Part);
  if (nums.some((n) => n === undefined || !Number.isSafeInteger(n))) return undefined;
  const values = nums as number[];
  const last = values[values.length - 1] as number;
  const head = values.slice(0, -1);
  if (head.some((n) => n > 255) || last >= 2 ** (8 * (4 - head.length))) return undefined;
  return head.reduce((acc, n, i) => acc + n * 2 ** (8 * (3 - i)), 0) + last;
}

/** The 8 groups of an IPv6 address (zone id dropped), or undefined. */
export function parseIPv6(text: string): number[] | undefined {
  const bare = text.replace(/%.*$/, '');
  if (!isIPv6(bare)) return undefined;
  // A dotted tail (::ffff:1.2.3.4) written as the two groups it is.
  const dotted = /:(\d+\.\d+\.\d+\.\d+)$/.exec(bare);
  const v4 = dotted ? parseIPv4(dotted[1] as string) : undefined;
  const body = dotted && v4 !== undefined ? `${bare.slice(0, dotted.index + 1)}${Math.floor(v4 / 65536).toString(16)}:${(v4 % 65536).toString(16)}` : bare;
  const [left = '', right] = body.split('::');
  const groups = (s: string) => (s === '' ? [] : s.split(':').map((g) => Number.parseInt(g, 16)));
  const l = groups(left);
  const r = right === undefined ? [] : groups(right);
  const fill = 8 - l.length - r.length;
  if (right === undefined ? fill !== 0 : fill < 0) return undefined;
  const g = [...l, ...Array(right === undefined ? 0 : fill).fill(0), ...r];
  return g.every((x) => Number.isInteger(x) && x >= 0 && x <= 0xffff) ? g : undefined;
}

function ipv4Class(v: number): AddressClass {
  const a = Math.floor(v / 2 ** 24);
  const b = Math.floor(v / 2 ** 16) % 256;
  if (a === 0) return 'unspecified';
  if (a === 127) return 'loopback';
  if (a === 169 && b === 254) return 'link-local';
  if (a === 10 || (a === 172 && b >= 16 && b <= 31) || (a === 192 && b === 168) || (a === 100 && b >= 64 && b <= 127)) return 'private';
  if (a >= 224) return 'special';
  return 'public';
}

function ipv4Text(v: number): string {
  return [24, 16, 8, 0].map((s) => Math.floor(v / 2 ** s) % 256).join('.');
}

/** The IPv4 address an IPv6 address carries in its last 32 bits, when it is one of the forms that reach it: mapped, compatible, SIIT, NAT64. */
function embeddedIPv4(g: number[]): number | undefined {
  const zero = (from: number, to: number) => g.slice(from, to).every((x) => x === 0);
  const v4 = (g[6] as number) * 65536 + (g[7] as number);
  // ::ffff:a.b.c.d (mapped), ::ffff:0:a.b.c.d (SIIT), ::a.b.c.d (compatible, deprecated: not :: and ::1 themselves).
  if (zero(0, 5) && g[5] === 0xffff) return v4;
  if (zero(0, 4) && g[4] === 0xffff && g[5] === 0) return v4;
  if (zero(0, 6) && v4 > 1) return v4;
  // 64:ff9b::/96 (well-known NAT64) and 64:ff9b:1::/48 (local-use NAT64): a translator reaches the IPv4 address.
  if (g[0] === 0x64 && g[1] === 0xff9b && (zero(2, 6) || g[2] === 1)) return v4;
  return undefined;
}

function ipv6Class(g: number[]): AddressClass {
  if (g.every((x) => x === 0)) return 'unspecified';
  if (g.slice(0, 7).every((x) => x === 0) && g[7] === 1) return 'loopback';
  const first = g[0] as number;
  if ((first & 0xffc0) === 0xfe80) return 'link-local';
  if ((first & 0xfe00) === 0xfc00 || (first & 0xffc0) === 0xfec0) return 'private';
  if ((first & 0xff00) === 0xff00) return 'special';
  return 'public';
}

/** The host of a URL (brackets and trailing dots allowed) or an address a lookup gave, read to what it reaches. */
export function hostIdentity(host: string): HostIdentity {
  const h = host.trim().toLowerCase().replace(/^\[(.*)\]$/, '$1').replace(/\.+$/, '');
  if (h.includes(':')) {
    const g = parseIPv6(h);
    if (g) {
      const v4 = embeddedIPv4(g);
      if (v4 !== undefined) return { key: ipv4Text(v4), cls: ipv4Class(v4) };
      return { key: g.map((x) => x.toString(16)).join(':'), cls: ipv6Class(g) };
    }
    return { key: h, cls: 'special' };
  }
  const v4 = isIPv4(h) || /^[0-9][0-9a-fx.]*$/.test(h) ? parseIPv4(h) : undefined;
  if (v4 !== undefined) return { key: ipv4Text(v4), cls: ipv4Class(v4) };
  if (h === '' || h === 'localhost' || h.endsWith('.localhost')) return { key: h === '' ? '' : 'localhost', cls: h === '' ? 'unspecified' : 'loopback' };
  // All digits and dots that are no address (256.1.1.1): nothing a connection reaches by name.
  if (/^[0-9.]+$/.test(h)) return { key: h, cls: 'special' };
  return { key: h, cls: 'name' };
}
