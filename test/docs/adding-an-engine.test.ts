import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ENGINE_CATALOG } from '../../src/agent/engines/engine-catalog.js';
import { ENGINE_NAMES } from '../../src/lib/engine-names.js';

/*
 * docs/adding-an-engine.md is the checked-in walkthrough of a new engine kind
 * (issue 50): its steps must stay the code's. Its name list and catalog are
 * today's plus the one new kind, the wings it points at have the files it
 * says a wing holds, and every path it names exists (but the new kind's own).
 */

const page = readFileSync(new URL('../../docs/adding-an-engine.md', import.meta.url), 'utf8');
const NEW = 'trtllm';
/** Whether a path of the checkout exists, wherever the tests are run from. */
const exists = (path: string): boolean => existsSync(new URL(`../../${path}`, import.meta.url));

describe('the walkthrough of adding an engine kind', () => {
  it("adds one name to today's list, and one entry to today's catalog", () => {
    const names = /export const ENGINE_NAMES = \[([^\]]*)\] as const;/.exec(page)?.[1];
    expect(names?.split(',').map((n) => n.trim().replace(/'/g, ''))).toEqual([...ENGINE_NAMES, NEW]);
    const catalog = /export const ENGINE_CATALOG[^{]*\{([^}]*)\}/.exec(page)?.[1] ?? '';
    const keys = [...catalog.matchAll(/^\s*(\w+):/gm)].map((m) => m[1]);
    expect(keys).toEqual([...Object.keys(ENGINE_CATALOG), NEW]);
  });

  it('describes the shape the real wings have: an engine class and a kind in each, args and sleep where the engine takes or sleeps', () => {
    for (const name of ENGINE_NAMES) {
      expect(exists(`src/agent/engines/${name}/${name}-engine.ts`), `${name}-engine.ts`).toBe(true);
      expect(exists(`src/agent/engines/${name}/${name}-kind.ts`), `${name}-kind.ts`).toBe(true);
    }
    for (const name of ['vllm', 'sglang']) {
      for (const file of ['args', 'sleep', 'known-answer', 'adapters']) expect(exists(`src/agent/engines/${name}/${name}-${file}.ts`), `${name}-${file}.ts`).toBe(true);
    }
  });

  it('names only files that exist, but the new kind\'s', () => {
    const paths = [...page.matchAll(/`((?:src|test)\/[\w./-]+\.ts)`/g)].map((m) => m[1] as string).filter((p) => !p.includes(NEW));
    expect(paths.length, 'the page names the files to touch').toBeGreaterThan(8);
    expect(paths.filter((p) => !exists(p))).toEqual([]);
  });
});
