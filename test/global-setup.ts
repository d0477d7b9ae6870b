import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { claimAgentNftTable, ensureNft } from './helpers/nft.js';

/**
 * Tests run the real binary, which runs dist/. `npm test` builds first; a
 * bare `npx vitest` on a fresh clone would otherwise fail in confusing ways.
 * Sleep-mode shards need nft for their port guard (test/helpers/nft.ts); the
 * table their agents make is removed at the end when this run made it.
 */
export default async function setup(): Promise<() => void> {
  const manifest = fileURLToPath(new URL('../oclif.manifest.json', import.meta.url));
  if (!existsSync(manifest)) {
    throw new Error('dist/ is not built: run `npm run build` (npm test does it for you)');
  }
  await ensureNft();
  const release = claimAgentNftTable();
  return () => {
    console.log(release());
  };
}
