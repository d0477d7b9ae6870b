import { describe, expect, it } from 'vitest';
import { Headers as WebHeaders } from '../../src/lib/web-headers.js';

/*
 * The agent's bundle gives connect-es this Headers instead of the global
 * (undici's), so that the steady agent never loads undici. Every case runs on
 * both and must give the same answer: the same iteration, the same values,
 * and a TypeError from both or from neither.
 */

type AnyHeaders = InstanceType<typeof globalThis.Headers> | WebHeaders;
type Step = (h: AnyHeaders) => unknown;

/** What a sequence of calls gives, or that it threw a TypeError. */
function outcome(make: () => AnyHeaders, steps: Step[]): unknown {
  try {
    const h = make();
    const results = steps.map((s) => s(h));
    return { results, entries: [...h], keys: [...h.keys()], values: [...h.values()], cookies: h.getSetCookie() };
  } catch (err) {
    return { threw: err instanceof TypeError ? 'TypeError' : String(err) };
  }
}

function same(init: unknown, ...steps: Step[]): unknown {
  const ours = outcome(() => new WebHeaders(init as never), steps);
  const undici = outcome(() => new globalThis.Headers(init as never), steps);
  expect(ours).toEqual(undici);
  return ours;
}

describe('web-headers Headers, beside undici', () => {
  it('is empty from nothing, undefined, an empty record and an empty sequence', () => {
    for (const init of [undefined, {}, []]) expect(same(init)).toMatchObject({ entries: [] });
  });

  it('reads names case-insensitively and iterates them lowercased in code-unit order', () => {
    const r = same({ 'X-B': '2', 'x-a': '1', 'Content-Type': 'application/proto', Zeta: 'z', _under: 'u' }, (h) => h.get('CONTENT-type'), (h) => h.has('X-A'), (h) => h.get('missing'));
    expect(r).toMatchObject({ results: ['application/proto', true, null] });
  });

  it('joins repeated values with ", " on get and iteration, in the order appended', () => {
    same(
      [
        ['Accept', 'a'],
        ['accept', 'b'],
        ['ACCEPT', 'c'],
      ],
      (h) => h.get('accept'),
    );
    same({}, (h) => h.append('grpc-accept-encoding', 'gzip'), (h) => h.append('Grpc-Accept-Encoding', 'br'), (h) => h.get('grpc-accept-encoding'));
  });

  it('keeps each set-cookie value apart in iteration and getSetCookie, joined only by get', () => {
    same(
      [
        ['Set-Cookie', 'a=1'],
        ['set-cookie', 'b=2'],
        ['x', 'y'],
      ],
      (h) => h.get('set-cookie'),
    );
  });

  it('set replaces every value of a name, delete removes them all, whatever the case', () => {
    same(
      [
        ['a', '1'],
        ['A', '2'],
        ['b', '3'],
      ],
      (h) => h.set('A', 'only'),
      (h) => h.delete('B'),
      (h) => h.has('b'),
      (h) => h.get('a'),
    );
  });

  it('trims HTTP whitespace at the ends of a value, and keeps it inside', () => {
    same({}, (h) => h.append('a', ' \t spaced out \r\n'), (h) => h.set('b', '\n x  y \t'), (h) => h.append('c', ''), (h) => h.append('d', '   '));
  });

  it('takes values of any byte, and stringifies what is not a string', () => {
    same({}, (h) => h.append('latin', 'caf\u00e9 \u00ff'), (h) => h.append('n', 42 as never), (h) => h.append('u', undefined as never));
  });

  it('copies another Headers, ours or undici, and an array of pairs', () => {
    const source = new globalThis.Headers([
      ['b', '2'],
      ['a', '1'],
      ['set-cookie', 'c=3'],
    ]);
    same(source);
    same(new WebHeaders(source));
    same(new Map([['k', 'v']]));
  });

  it('throws TypeError for names that are not tokens', () => {
    for (const name of ['', 'with space', 'colon:', 'q"uote', 'n\u00e9', '(paren)', 'slash/']) {
      expect(same({}, (h) => h.append(name, 'v'))).toEqual({ threw: 'TypeError' });
      expect(same({}, (h) => h.get(name))).toEqual({ threw: 'TypeError' });
    }
  });

  it("throws TypeError for values with NUL, CR or LF inside, or a character beyond one byte, and for init pairs that are not pairs", () => {
    for (const value of ['a\nb', 'a\rb', 'a\0b', 'arrow \u2192']) expect(same({}, (h) => h.set('x', value))).toEqual({ threw: 'TypeError' });
    expect(same([['only-name']])).toEqual({ threw: 'TypeError' });
    expect(same([['a', 'b', 'c']])).toEqual({ threw: 'TypeError' });
    expect(same('a string' as never)).toEqual({ threw: 'TypeError' });
  });

  it('walks forEach as iteration does, with this headers as the third argument, seeing what its callback changes as undici does', () => {
    const walk = (h: AnyHeaders) => {
      const seen: string[] = [];
      h.forEach((value, name, self) => {
        seen.push(`${name}=${value}:${self === h}`);
        h.delete('b');
        h.append('z', 'late');
      });
      return seen;
    };
    expect(
      same(
        [
          ['b', '2'],
          ['a', '1'],
          ['a', '0'],
        ],
        walk,
      ),
    ).toMatchObject({ results: [['a=1, 0:true', 'z=late:true']] });
  });

  it('reads as Headers to Object.prototype.toString', () => {
    expect(Object.prototype.toString.call(new WebHeaders())).toBe(Object.prototype.toString.call(new globalThis.Headers()));
  });
});
