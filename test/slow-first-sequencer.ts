import { readFileSync } from 'node:fs';
import { relative } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/*
 * Runs the longest test files first, so that the last minutes of a run are
 * short files spread over every worker rather than one long file (the 60 s
 * SGLang generation, a flood, `dev up`) holding the run open while the other
 * workers idle. vitest's own order does this only from its cache of a
 * previous run; a fresh clone (CI) has none and got the files by size, which
 * put test/e2e/sglang-long-generation.test.ts, a small file, among the last.
 *
 * test/file-durations.json holds seconds per file as measured in a full run
 * (files under 5 s are left out); a file not in it counts by vitest's cache
 * when there is one, else as 0, and ties go by size like vitest's own order.
 * The figures only order the files: a stale one costs some minutes at worst.
 */

const HINTS: Record<string, number> = JSON.parse(readFileSync(new URL('./file-durations.json', import.meta.url), 'utf8'));

export default class SlowFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const root = this.ctx.config.root;
    const cache = this.ctx.cache;
    const keyOf = (f: TestSpecification) => relative(root, f.moduleId);
    const seconds = (f: TestSpecification) => {
      const hint = HINTS[keyOf(f)];
      if (hint !== undefined) return hint;
      const cached = cache.getFileTestResults(`${f.project.name}:${keyOf(f)}`);
      return cached ? cached.duration / 1000 : 0;
    };
    const size = (f: TestSpecification) => cache.getFileStats(`${f.project.name}:${keyOf(f)}`)?.size ?? 0;
    return [...files].sort((a, b) => seconds(b) - seconds(a) || size(b) - size(a));
  }
}
