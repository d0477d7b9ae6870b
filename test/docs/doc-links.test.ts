import { existsSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { describe, expect, it } from 'vitest';
import { docPages, readDoc } from '../helpers/doc-pages.js';
import { REPO_ROOT } from '../helpers/run-cli.js';

/*
 * Every relative link of README.md and docs/*.md names a file that exists,
 * and its #fragment a heading of that file, as GitHub makes heading anchors.
 */

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens; repeats get -1, -2. */
function headingAnchors(markdown: string): Set<string> {
  const anchors = new Set<string>();
  let inFence = false;
  for (const line of markdown.split('\n')) {
    if (/^ {0,3}```/.test(line)) inFence = !inFence;
    const h = inFence ? null : /^#{1,6} (.*)$/.exec(line);
    if (!h) continue;
    const base = (h[1] as string)
      .trim()
      .toLowerCase()
      .replace(/[^\p{L}\p{N} _-]/gu, '')
      .replace(/ /g, '-');
    let anchor = base;
    for (let n = 1; anchors.has(anchor); n++) anchor = `${base}-${n}`;
    anchors.add(anchor);
  }
  return anchors;
}

/** The link targets of a page's text, outside code blocks and code spans. */
function linkTargets(markdown: string): string[] {
  const prose = markdown
    .split(/^ {0,3}```.*$/m)
    .filter((_, i) => i % 2 === 0)
    .join('\n')
    .replace(/`[^`\n]*`/g, '');
  return [...prose.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)].map((m) => m[1] as string);
}

/** What is wrong with each relative link of `page` (a path from the checkout's root); [] when every one resolves. */
function brokenLinks(page: string, markdown: string): string[] {
  const broken: string[] = [];
  for (const target of linkTargets(markdown)) {
    if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue;
    const [path = '', fragment] = target.split('#');
    const file = path === '' ? page : normalize(join(dirname(page), path));
    if (path !== '' && !existsSync(join(REPO_ROOT, file))) {
      broken.push(`${page}: ${target}: no file ${file}`);
      continue;
    }
    if (fragment !== undefined && file.endsWith('.md') && !headingAnchors(file === page ? markdown : readDoc(file)).has(fragment)) {
      broken.push(`${page}: ${target}: ${file} has no heading #${fragment}`);
    }
  }
  return broken;
}

describe('links in README.md and docs/', () => {
  it('each resolve to a file that exists, and a fragment to one of its headings', () => {
    const pages = docPages();
    expect(pages).toContain('docs/README.md');
    expect(pages.flatMap((p) => linkTargets(readDoc(p))).length, 'the pages link to each other').toBeGreaterThan(30);
    expect(pages.flatMap((p) => brokenLinks(p, readDoc(p)))).toEqual([]);
  });

  it('reports a missing file, a missing heading and a fragment on the same page; not a web link, code, or a heading that exists', () => {
    const page = [
      '# A page',
      '## Live: `ctl events` and `ctl top`',
      '## Repeated',
      '## Repeated',
      '[ok](install.md#a-node-without-gpus) [ok](../README.md) [ok](#live-ctl-events-and-ctl-top) [ok](#repeated-1)',
      '[web](https://example.com/nosuch.md) [code](`nosuch.md`) `[span](nosuch.md)`',
      '```sh',
      '[block](nosuch.md)',
      '```',
      '[bad](nosuch.md) [bad](install.md#no-such-heading) [bad](#nowhere)',
    ].join('\n');
    expect(brokenLinks('docs/look-alike.md', page)).toEqual([
      'docs/look-alike.md: nosuch.md: no file docs/nosuch.md',
      'docs/look-alike.md: install.md#no-such-heading: docs/install.md has no heading #no-such-heading',
      'docs/look-alike.md: #nowhere: docs/look-alike.md has no heading #nowhere',
    ]);
  });
});
