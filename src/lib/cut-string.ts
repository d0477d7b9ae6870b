/**
 * `s` cut to `max` characters, as a copy: V8's slice() of a long string is a
 * view that keeps the whole original alive, so a sliced 4 MB id still held
 * 4 MB (1.2 GB for 174 refusals waiting in the outbox of a stuck stream).
 */
export function cutString(s: string, max: number): string {
  return s.length <= max ? s : `${Buffer.from(s.slice(0, max - 1)).toString()}…`;
}
