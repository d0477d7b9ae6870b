import { usageError } from '../lib/errors.js';

/**
 * huggingface_hub's allow_patterns (filter_repo_objects): fnmatch patterns
 * against the whole repo path, where `*` also crosses `/`, `?` is one
 * character, `[...]` a class (`[!...]` its complement, `a-z` a range); a
 * pattern ending in `/` means everything under that folder.
 *
 * Matched without backtracking (security review 3, S3): a pattern is the
 * pieces between its stars, and a path matches when the first piece fits at
 * its start, the last at its end, and every other piece at the leftmost place
 * after the one before. Leftmost is enough, since a star takes any run of
 * characters, so the cost is at most the path's length times the pattern's.
 * A regular expression of `.*` per star backtracked instead: 25 characters
 * of stars held the agent's event loop for minutes.
 */
export function includeMatcher(patterns: readonly string[]): (path: string) => boolean {
  if (patterns.length === 0) return () => true;
  const globs = patterns.map(parseGlob);
  return (path) => globs.some((g) => matchGlob(g, path));
}

/** One character of a pattern: a literal, `?`, or a class. */
type Atom = string | ((c: string) => boolean);

/** The pieces between the stars; `starred` when there was at least one star. */
interface Glob {
  pieces: Atom[][];
  starred: boolean;
}

const ANY = () => true;

function parseGlob(pattern: string): Glob {
  if (pattern === '' || pattern.includes('\0')) throw usageError(`--include ${JSON.stringify(pattern)} is not a file pattern; write it like '*.safetensors'`);
  const p = pattern.endsWith('/') ? `${pattern}*` : pattern;
  const pieces: Atom[][] = [[]];
  for (let i = 0; i < p.length; i++) {
    const c = p[i] as string;
    const piece = pieces[pieces.length - 1] as Atom[];
    if (c === '*') {
      // A run of stars is one star.
      if (p[i - 1] !== '*') pieces.push([]);
    } else if (c === '?') piece.push(ANY);
    else if (c === '[') {
      // As fnmatch: a ']' right after '[' (or '[!') belongs to the class; no closing ']' makes '[' a literal.
      const end = p.indexOf(']', i + (p[i + 1] === '!' ? 3 : 2));
      if (end < 0) {
        piece.push('[');
        continue;
      }
      piece.push(classTest(p.slice(i + 1, end)));
      i = end;
    } else piece.push(c);
  }
  return { pieces, starred: pieces.length > 1 };
}

/** fnmatch's `[...]`: characters and ranges, complemented by a leading `!`. */
function classTest(body: string): (c: string) => boolean {
  const negate = body.startsWith('!');
  const set = negate ? body.slice(1) : body;
  const ranges: [string, string][] = [];
  for (let i = 0; i < set.length; i++) {
    const lo = set[i] as string;
    if (set[i + 1] === '-' && i + 2 < set.length) {
      ranges.push([lo, set[i + 2] as string]);
      i += 2;
    } else ranges.push([lo, lo]);
  }
  return (c) => ranges.some(([lo, hi]) => c >= lo && c <= hi) !== negate;
}

function fitsAt(piece: Atom[], s: string, at: number): boolean {
  if (at < 0 || at + piece.length > s.length) return false;
  for (let k = 0; k < piece.length; k++) {
    const atom = piece[k] as Atom;
    const c = s[at + k] as string;
    if (typeof atom === 'string' ? atom !== c : !atom(c)) return false;
  }
  return true;
}

function matchGlob(g: Glob, s: string): boolean {
  const first = g.pieces[0] as Atom[];
  if (!g.starred) return first.length === s.length && fitsAt(first, s, 0);
  const last = g.pieces[g.pieces.length - 1] as Atom[];
  if (!fitsAt(first, s, 0)) return false;
  let pos = first.length;
  const tail = s.length - last.length;
  for (let m = 1; m < g.pieces.length - 1; m++) {
    const piece = g.pieces[m] as Atom[];
    let at = pos;
    while (at + piece.length <= tail && !fitsAt(piece, s, at)) at++;
    if (at + piece.length > tail) return false;
    pos = at + piece.length;
  }
  return tail >= pos && fitsAt(last, s, tail);
}
