/**
 * The Fetch standard's Headers class (https://fetch.spec.whatwg.org/#headers-class),
 * as undici implements it in Node 20, without undici. The agent's bundle
 * uses it in place of the global (scripts/bundle-agent-run.mjs injects it):
 * connect-es builds a Headers for every call, and the global's first use
 * loads all of undici (fetch, its bodies, web streams, WebSocket), which the
 * steady agent never uses otherwise: 5.5 MB of its RSS with 8 shards (bench
 * figure 5a: 69.8 -> 64.3 MB). fetch() still loads undici where it is called (model pulls,
 * adapter calls), and accepts this class as its init like any iterable.
 *
 * The same answers as undici's for the same calls (test/lib/web-headers.test.ts
 * compares the two): names are case-insensitive and iterate lowercased, sorted,
 * with repeated values joined by ", " (set-cookie's apart); values lose leading
 * and trailing HTTP whitespace; invalid names or values, and characters beyond
 * one byte, throw TypeError.
 */

type HeadersInitLike = Iterable<Iterable<string>> | Record<string, string> | undefined | null;

/** RFC 9110 token: the characters a field name may have. */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** HTTP whitespace at either end of a value: removed, never an error. */
const EDGE_WHITESPACE = /^[\t\n\r ]+|[\t\n\r ]+$/g;
/** What no value may hold once trimmed. */
const FORBIDDEN_IN_VALUE = /[\0\r\n]/;

function byteString(what: string, v: unknown): string {
  const s = String(v);
  for (let i = 0; i < s.length; i++) {
    if (s.charCodeAt(i) > 255) throw new TypeError(`Headers: ${what} ${JSON.stringify(s)} has a character beyond one byte at ${i}`);
  }
  return s;
}

function checkedName(name: unknown): string {
  const s = byteString('name', name);
  if (!TOKEN.test(s)) throw new TypeError(`Headers: invalid header name ${JSON.stringify(s)}`);
  return s.toLowerCase();
}

function checkedValue(name: string, value: unknown): string {
  const s = byteString('value', value).replace(EDGE_WHITESPACE, '');
  if (FORBIDDEN_IN_VALUE.test(s)) throw new TypeError(`Headers: invalid value for header ${JSON.stringify(name)}`);
  return s;
}

export class Headers {
  /** Lowercased name -> its values, in the order appended. */
  readonly #list = new Map<string, string[]>();
  /** #sortedAndCombined()'s answer until the next change. */
  #sorted: [string, string][] | undefined;

  constructor(init?: HeadersInitLike) {
    if (init === undefined || init === null) return;
    if (typeof init !== 'object' && typeof init !== 'function') throw new TypeError('Headers: init must be an object or a sequence of pairs');
    if (typeof (init as Iterable<unknown>)[Symbol.iterator] === 'function') {
      for (const pair of init as Iterable<Iterable<string>>) {
        const p = [...pair];
        if (p.length !== 2) throw new TypeError('Headers: each pair of a sequence init must have two items');
        this.append(p[0] as string, p[1] as string);
      }
      return;
    }
    for (const key of Object.keys(init)) this.append(key, (init as Record<string, string>)[key] as string);
  }

  append(name: string, value: string): void {
    const n = checkedName(name);
    const v = checkedValue(name, value);
    this.#sorted = undefined;
    const values = this.#list.get(n);
    if (values) values.push(v);
    else this.#list.set(n, [v]);
  }

  set(name: string, value: string): void {
    const n = checkedName(name);
    const v = checkedValue(name, value);
    this.#sorted = undefined;
    this.#list.set(n, [v]);
  }

  delete(name: string): void {
    const n = checkedName(name);
    this.#sorted = undefined;
    this.#list.delete(n);
  }

  get(name: string): string | null {
    return this.#list.get(checkedName(name))?.join(', ') ?? null;
  }

  has(name: string): boolean {
    return this.#list.has(checkedName(name));
  }

  getSetCookie(): string[] {
    return [...(this.#list.get('set-cookie') ?? [])];
  }

  /**
   * The standard's "sort and combine": lowercased names in code-unit order,
   * each set-cookie value apart. Kept until the headers change.
   */
  #sortedAndCombined(): [string, string][] {
    if (this.#sorted) return this.#sorted;
    const out: [string, string][] = [];
    for (const n of [...this.#list.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))) {
      const values = this.#list.get(n) as string[];
      if (n === 'set-cookie') for (const v of values) out.push([n, v]);
      else out.push([n, values.join(', ')]);
    }
    this.#sorted = out;
    return out;
  }

  /**
   * WebIDL's pair iterator, as undici's: an index into the sorted pairs as
   * they are at each step, so that changes made during a walk (a forEach
   * callback's) are seen as undici shows them.
   */
  *entries(): IterableIterator<[string, string]> {
    for (let i = 0; i < this.#sortedAndCombined().length; i++) yield [...(this.#sortedAndCombined()[i] as [string, string])];
  }

  *keys(): IterableIterator<string> {
    for (const [n] of this.entries()) yield n;
  }

  *values(): IterableIterator<string> {
    for (const [, v] of this.entries()) yield v;
  }

  [Symbol.iterator](): IterableIterator<[string, string]> {
    return this.entries();
  }

  forEach(callback: (value: string, name: string, headers: Headers) => void, thisArg?: unknown): void {
    if (typeof callback !== 'function') throw new TypeError('Headers: forEach needs a function');
    for (const [n, v] of this.entries()) callback.call(thisArg, v, n, this);
  }

  get [Symbol.toStringTag](): string {
    return 'Headers';
  }
}
