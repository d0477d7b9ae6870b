import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT, runCli } from '../helpers/run-cli.js';

const manifest = JSON.parse(readFileSync(join(REPO_ROOT, 'oclif.manifest.json'), 'utf8')) as {
  commands: Record<string, { summary?: string; examples?: unknown[] }>;
};
const ids = Object.keys(manifest.commands);

describe('help', () => {
  it('lists every command that exists', async () => {
    const r = await runCli(['--help']);
    expect(r.exitCode).toBe(0);
    for (const topic of new Set(ids.map((id) => id.split(':')[0]))) {
      expect(r.stdout).toContain(topic);
    }
  });

  it.each(ids)('%s has a summary and at least one example', async (id) => {
    const cmd = manifest.commands[id];
    expect(cmd?.summary, `${id} has no summary`).toBeTruthy();
    expect(cmd?.examples?.length ?? 0, `${id} has no example`).toBeGreaterThan(0);
    const r = await runCli([...id.split(':'), '--help']);
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toContain('EXAMPLES');
  });
});

describe('--version', () => {
  it('prints what oclif prints as the VERSION in --help', async () => {
    const [version, help] = await Promise.all([runCli(['--version']), runCli(['--help'])]);
    expect(version.exitCode).toBe(0);
    const fromHelp = /^VERSION\n\s+(.+)$/m.exec(help.stdout)?.[1];
    expect(fromHelp).toMatch(/^llmgw\/\d+\.\d+\.\d+ linux-\w+ node-v\d+/);
    expect(version.stdout.trim()).toBe(fromHelp);
  });
});
