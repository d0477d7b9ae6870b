import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../helpers/run-cli.js';

/**
 * The bundle `agent run` starts from (scripts/bundle-agent-run.mjs, built by
 * `npm run build`). What it imports from outside itself at the top level is
 * loaded at every agent start, before Register, whatever the agent uses.
 */
const bundle = readFileSync(join(REPO_ROOT, 'dist/agent-run.bundle.js'), 'utf8');

/** The packages (not node: builtins) the bundle imports statically, which load with it. */
function staticImports(text: string): string[] {
  const found = new Set<string>();
  // The bundle is built without whitespace: `import{a as b}from"x";`, `import*as y from"x";`, `import"x";`.
  for (const m of text.matchAll(/(?:^|[;}\n])import\s*(?:[{*\w][^;("']*?from\s*)?"([^"]+)"/g)) {
    const spec = m[1] as string;
    if (!spec.startsWith('node:')) found.add(spec);
  }
  return [...found].sort();
}

describe('the agent-run bundle', () => {
  it('loads no package at start but koffi (NVML, tried at every start): prom-client only with metrics_addr', () => {
    // prom-client, imported by the lazily loaded metrics module, was hoisted
    // to the bundle's top: ~60 ms of every start, with no metrics asked for.
    expect(staticImports(bundle)).toEqual(['koffi']);
  });

  it('carries execa itself, so the nvidia-smi run right after Register loads no module files', () => {
    // Loaded from node_modules it took 140–240 ms of the main thread just
    // when adopted shards report READY and a death must reach the stream.
    expect(bundle).not.toMatch(/import\(\s*"execa"\s*\)/);
    expect(staticImports(bundle)).not.toContain('execa');
    // execa's own error wording: its code is in the bundle, not loaded beside it.
    expect(bundle).toContain('Command failed with');
  });
});
