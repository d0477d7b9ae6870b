import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT } from './run-cli.js';

/**
 * The operator-facing pages, in the order a reader (and the runnable-docs
 * test) takes them: README.md, then docs/*.md by name. Paths are relative to
 * the checkout's root.
 */
export function docPages(): string[] {
  const docs = readdirSync(join(REPO_ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .sort()
    .map((f) => `docs/${f}`);
  return ['README.md', ...docs];
}

/** A page's text, by its path relative to the checkout's root. */
export function readDoc(page: string): string {
  return readFileSync(join(REPO_ROOT, page), 'utf8');
}

export interface FencedBlock {
  page: string;
  /** 1-based line of the opening fence. */
  line: number;
  /** The words after the opening backticks: `sh runnable` gives ['sh', 'runnable']. */
  info: string[];
  body: string;
}

/** Every fenced (```) block of a page, with its info string and where it starts. */
export function fencedBlocks(page: string, text = readDoc(page)): FencedBlock[] {
  const blocks: FencedBlock[] = [];
  let open: { line: number; info: string[]; body: string[] } | undefined;
  text.split('\n').forEach((l, i) => {
    const fence = /^ {0,3}```(.*)$/.exec(l);
    if (!open) {
      if (fence) open = { line: i + 1, info: (fence[1] ?? '').trim().split(/\s+/).filter(Boolean), body: [] };
      return;
    }
    if (fence && (fence[1] ?? '').trim() === '') {
      blocks.push({ page, line: open.line, info: open.info, body: open.body.join('\n') });
      open = undefined;
      return;
    }
    open.body.push(l);
  });
  if (open) throw new Error(`${page}:${open.line}: a code block is never closed`);
  return blocks;
}

/** The text of a page from the heading that starts with `heading` to the next heading of its level or above. */
export function section(page: string, heading: string, text = readDoc(page)): string {
  const lines = text.split('\n');
  const start = lines.findIndex((l) => /^#+ /.test(l) && l.replace(/^#+ /, '').startsWith(heading));
  if (start < 0) throw new Error(`${page} has no heading "${heading}"`);
  const level = /^#+/.exec(lines[start] as string)?.[0].length ?? 1;
  let inFence = false;
  let end = lines.length;
  for (let i = start + 1; i < lines.length; i++) {
    const l = lines[i] as string;
    if (/^ {0,3}```/.test(l)) inFence = !inFence;
    const m = /^(#+) /.exec(l);
    if (!inFence && m && (m[1] as string).length <= level) {
      end = i;
      break;
    }
  }
  return lines.slice(start, end).join('\n');
}
