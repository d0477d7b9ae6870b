import { SORT_KEYS, type SortKey } from './render-top.js';

/** What the keys have set: the sort, the filter, the one being typed. */
export interface TopKeysState {
  sort: SortKey;
  filter: string;
  /** The filter being typed after `/`; undefined when not typing. */
  typing?: string;
}

export type TopKeyResult = 'quit' | 'redraw' | 'none';

const CTRL_C = '\x03';
const ESC = '\x1b';
const BACKSPACE = new Set(['\x7f', '\b']);
const ENTER = new Set(['\r', '\n']);

/**
 * One chunk of raw-mode input, applied to `state`: q or Ctrl-C quits, s
 * cycles the sort, / starts a filter (typed, then Enter applies it and Esc
 * clears it). Ctrl-C quits also while typing: it is never text.
 */
export function handleTopKeys(state: TopKeysState, chunk: string): TopKeyResult {
  let result: TopKeyResult = 'none';
  // An arrow key or other escape sequence arrives as one chunk: as a whole it means "cancel", never text.
  if (chunk.length > 1 && chunk.startsWith(ESC)) chunk = ESC;
  for (const ch of chunk) {
    if (ch === CTRL_C) return 'quit';
    if (state.typing !== undefined) {
      if (ENTER.has(ch)) {
        state.filter = state.typing;
        state.typing = undefined;
      } else if (ch === ESC) {
        state.filter = '';
        state.typing = undefined;
      } else if (BACKSPACE.has(ch)) state.typing = state.typing.slice(0, -1);
      else if (ch >= ' ') state.typing += ch;
      result = 'redraw';
      continue;
    }
    if (ch === 'q') return 'quit';
    if (ch === 's') {
      state.sort = SORT_KEYS[(SORT_KEYS.indexOf(state.sort) + 1) % SORT_KEYS.length] as SortKey;
      result = 'redraw';
    } else if (ch === '/') {
      state.typing = '';
      result = 'redraw';
    } else if (ch === ESC && state.filter !== '') {
      state.filter = '';
      result = 'redraw';
    }
  }
  return result;
}
