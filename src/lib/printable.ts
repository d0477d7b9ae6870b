/**
 * Text from another party (the control plane's replica ids and models, an
 * engine's errors) made safe to print on an operator's terminal: C0 and C1
 * control characters, DEL and the bidirectional overrides are shown as
 * `\xNN` / `\uNNNN` escapes instead of being emitted. Printed raw, an
 * `ESC [2J` clears the screen, an OSC sets the window title and `ESC [8m`
 * hides the rest of a row (security review, finding 11). Newlines and tabs
 * are escaped too: a table cell or a one-line error must stay one line.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
const UNPRINTABLE = /[\u0000-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

export function printable(text: string): string {
  return text.replace(UNPRINTABLE, (c) => {
    const code = c.charCodeAt(0);
    return code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`;
  });
}

/**
 * The first character `printable` would escape, itself escaped, or undefined
 * when there is none: for refusing such text where it is taken in (a replica
 * id, a model name from the control plane) rather than escaping it wherever
 * it is shown.
 */
export function firstUnprintable(text: string): string | undefined {
  const found = text.match(new RegExp(UNPRINTABLE.source));
  return found ? printable(found[0]) : undefined;
}
