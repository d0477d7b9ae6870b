import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TestProject } from 'vitest/node';
import { claimAgentNftTable, ensureNft } from './helpers/nft.js';

/**
 * Tests run the real binary, which runs dist/. `npm test` builds first; a
 * bare `npx vitest` on a fresh clone would otherwise fail in confusing ways.
 * Sleep-mode shards need nft for their port guard (test/helpers/nft.ts); the
 * table their agents make is removed at the end when this run made it.
 * What files build once per run (test/helpers/suite-deb.ts) goes in a
 * folder of the run's, removed at the end.
 */
export default async function setup(project: TestProject): Promise<() => void> {
  const manifest = fileURLToPath(new URL('../oclif.manifest.json', import.meta.url));
  if (!existsSync(manifest)) {
    throw new Error('dist/ is not built: run `npm run build` (npm test does it for you)');
  }
  await ensureNft();
  const release = claimAgentNftTable();
  const buildDir = mkdtempSync(join(tmpdir(), 'llmgw-suite-build-'));
  project.provide('suiteBuildDir', buildDir);
  return () => {
    rmSync(buildDir, { recursive: true, force: true });
    console.log(release());
  };
}
