import { describe, expect, it } from 'vitest';
import { handleTopKeys, type TopKeysState } from '../../../src/ctl/top/top-keys.js';

describe('ctl top keys', () => {
  it('quits on q and on Ctrl-C, also while a filter is typed', () => {
    expect(handleTopKeys({ sort: 'state', filter: '' }, 'q')).toBe('quit');
    expect(handleTopKeys({ sort: 'state', filter: '', typing: 'ab' }, '\x03')).toBe('quit');
  });

  it('cycles the sort with s, back to the first after the last', () => {
    const st: TopKeysState = { sort: 'shard', filter: '' };
    const seen = [1, 2, 3, 4].map(() => {
      handleTopKeys(st, 's');
      return st.sort;
    });
    expect(seen).toEqual(['state', 'age', 'gpu', 'shard']);
  });

  it('types a filter after /, where q is text; Enter applies it, Backspace edits, Esc clears it', () => {
    const st: TopKeysState = { sort: 'state', filter: '' };
    handleTopKeys(st, '/');
    handleTopKeys(st, 'qwx');
    handleTopKeys(st, '\x7f');
    expect(st.typing).toBe('qw');
    handleTopKeys(st, '\r');
    expect(st).toEqual({ sort: 'state', filter: 'qw', typing: undefined });
    handleTopKeys(st, '\x1b[A');
    expect(st.filter).toBe('');
  });
});
