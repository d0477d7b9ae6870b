import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { fencedBlocks, section } from '../helpers/doc-pages.js';
import { REPO_ROOT, runCli } from '../helpers/run-cli.js';

/*
 * docs/install.md's "A node without GPUs" (walkthrough 4, O8): its
 * configuration, with the package's /usr/lib/llmgw as this checkout (the
 * package ships the same bin/ and fixtures/) and existing accounts for the
 * package's, passes `discover --strict` on the data set the page names, and
 * fails it on the default box, as the page says.
 */

function recipe(): { yaml: string; dataset: string } {
  const text = section('docs/install.md', 'A node without GPUs');
  const yaml = fencedBlocks('docs/install.md', text).find((b) => b.info[0] === 'yaml')?.body;
  const dataset = /Environment=LLMGW_FAKE_GPUS=([\w-]+)/.exec(text)?.[1];
  if (!yaml || !dataset) throw new Error('docs/install.md\'s "A node without GPUs" has no yaml block or no LLMGW_FAKE_GPUS drop-in');
  return { yaml: yaml.replaceAll('/usr/lib/llmgw', REPO_ROOT.replace(/\/$/, '')).replaceAll('llmgw-engine', 'nobody').replaceAll('llmgw-ops', 'nogroup'), dataset };
}

function configFile(yaml: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-no-gpu-recipe-'));
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'agent.yaml'), yaml);
  return join(dir, 'agent.yaml');
}

describe("docs/install.md's node without GPUs", () => {
  it('passes discover --strict on the data set its drop-in names, the sim engine its only one', async () => {
    const { yaml, dataset } = recipe();
    expect(dataset).toBe('pcie-l40sx4');
    const r = await runCli(['discover', '--config', configFile(yaml), '--strict'], { env: { LLMGW_FAKE_GPUS: dataset } });
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^ok +engine-account sim +sim → nobody/m);
    expect(r.stdout).not.toMatch(/engine-account (vllm|sglang)/);
  });

  it('fails it on the default box, whose GPUs 3 and 4 hold foreign memory, as the page says', async () => {
    const r = await runCli(['discover', '--config', configFile(recipe().yaml), '--strict'], { env: { LLMGW_FAKE_GPUS: 'hgx-h100x8' } });
    expect(r.exitCode).toBe(1);
    expect(r.stdout).toMatch(/^FAIL +foreign-memory +GPU 3: /m);
  });
});
