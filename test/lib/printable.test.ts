import { describe, expect, it } from 'vitest';
import { printable } from '../../src/lib/printable.js';

describe('printable', () => {
  it('shows an ESC sequence (clear screen, window title, hidden text) escaped, not emitted', () => {
    const hostile = 'r\u001b[2J\u001b[H\u001b]0;owned-title\u0007';
    const out = printable(hostile);
    expect(out).toBe('r\\x1b[2J\\x1b[H\\x1b]0;owned-title\\x07');
    // biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
    expect(out).not.toMatch(/[\u0000-\u001f\u007f-\u009f]/);
  });

  it('escapes C1 controls (CSI as one byte), DEL, newlines and bidirectional overrides', () => {
    expect(printable('a\u009b2Jb\u007fc\nd\u202ee')).toBe('a\\x9b2Jb\\x7fc\\x0ad\\u202ee');
  });

  it('leaves printable text, Unicode included, as it is', () => {
    expect(printable('llama-70b-0-g1-r0 · 8 × H100 — ok')).toBe('llama-70b-0-g1-r0 · 8 × H100 — ok');
  });
});
