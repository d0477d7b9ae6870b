import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { execa } from 'execa';
import { afterAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../helpers/run-cli.js';

const out = mkdtempSync(join(tmpdir(), 'llmgw-gen-'));
afterAll(() => rmSync(out, { recursive: true, force: true }));

function files(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((d) => d.isFile())
    .map((d) => relative(dir, join(d.parentPath, d.name)))
    .sort();
}

describe('the wire contract', () => {
  it('passes buf lint', async () => {
    const r = await execa('npx', ['buf', 'lint'], { cwd: REPO_ROOT, reject: false });
    expect(r.stdout + r.stderr).toBe('');
    expect(r.exitCode).toBe(0);
  });

  it('matches the committed generated code (run `npm run gen` after editing proto/)', async () => {
    await execa('npx', ['buf', 'generate', '--output', out], { cwd: REPO_ROOT });
    const fresh = join(out, 'src/gen');
    const committed = join(REPO_ROOT, 'src/gen');
    expect(files(fresh)).toEqual(files(committed));
    for (const f of files(fresh)) {
      expect(readFileSync(join(committed, f), 'utf8'), f).toBe(readFileSync(join(fresh, f), 'utf8'));
    }
  });
});
