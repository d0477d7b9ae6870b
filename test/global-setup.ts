import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/**
 * Tests run the real binary, which runs dist/. `npm test` builds first; a
 * bare `npx vitest` on a fresh clone would otherwise fail in confusing ways.
 */
export default function setup(): void {
  const manifest = fileURLToPath(new URL('../oclif.manifest.json', import.meta.url));
  if (!existsSync(manifest)) {
    throw new Error('dist/ is not built: run `npm run build` (npm test does it for you)');
  }
}
