/**
 * Longest line handed out whole, in characters; a longer one comes in pieces
 * of this size. Otherwise a line is held whole before it is handed out, and
 * a log without newlines (a progress bar) is one line as long as the file.
 */
export const MAX_LINE_CHARS = 64 * 1024;

/**
 * `text` split at its newlines, the last element the unfinished line (''
 * after a final newline). A line longer than MAX_LINE_CHARS is cut into
 * pieces of at most that size, the unfinished one too, so that what the
 * caller carries over to the next read stays short.
 */
export function splitLines(text: string): string[] {
  const parts = text.split('\n');
  if (text.length <= MAX_LINE_CHARS) return parts;
  const out: string[] = [];
  for (const part of parts) {
    let rest = part;
    while (rest.length > MAX_LINE_CHARS) {
      // Not between the two halves of a surrogate pair: each piece stays valid text.
      const high = rest.charCodeAt(MAX_LINE_CHARS - 1);
      const cut = high >= 0xd800 && high <= 0xdbff ? MAX_LINE_CHARS - 1 : MAX_LINE_CHARS;
      out.push(rest.slice(0, cut));
      rest = rest.slice(cut);
    }
    out.push(rest);
  }
  return out;
}
