import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { format } from 'node:util';
import { Config, run, settings } from '@oclif/core';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { REPO_ROOT, runCli } from '../helpers/run-cli.js';

const manifest = JSON.parse(readFileSync(join(REPO_ROOT, 'oclif.manifest.json'), 'utf8')) as {
  commands: Record<string, { summary?: string; description?: string; examples?: unknown[] }>;
};
const ids = Object.keys(manifest.commands);

/**
 * Commands bin/run.js answers without oclif in their plain forms (its
 * answeredWithoutOclif): their --help must still reach oclif, which only the
 * real binary shows.
 */
const FAST_PATHS = ['agent:run', 'ctl:status', 'sim:engine'];

/*
 * The other commands' --help is oclif's own run(), as bin/run.js calls it,
 * in this process: a `llmgw <command> --help` process per command cost 0.4 s
 * of CPU each (Node and oclif starting), 28 of them the most of this file.
 */
let config: Config;
let autoTranspile: boolean | undefined;
beforeAll(async () => {
  // As bin/run.js: the compiled dist/, never TypeScript sources (NODE_ENV is "test" here).
  autoTranspile = settings.enableAutoTranspile;
  settings.enableAutoTranspile = false;
  config = await Config.load(REPO_ROOT);
});
afterAll(() => {
  settings.enableAutoTranspile = autoTranspile;
});

/** `llmgw <argv>` through oclif's run(), what it wrote to stdout (oclif's ux.stdout is console.log). */
async function oclifStdout(argv: string[]): Promise<string> {
  let out = '';
  const write = vi.spyOn(console, 'log').mockImplementation((...args: unknown[]) => {
    out += `${format(...args)}\n`;
  });
  try {
    await run(argv, config);
  } finally {
    write.mockRestore();
  }
  return out;
}

/** `llmgw --help`, run once for the two tests that read it. */
let rootHelpRun: ReturnType<typeof runCli> | undefined;
const rootHelp = () => {
  rootHelpRun ??= runCli(['--help']);
  return rootHelpRun;
};

describe('help', () => {
  it('lists every command that exists', async () => {
    const r = await rootHelp();
    expect(r.exitCode).toBe(0);
    for (const topic of new Set(ids.map((id) => id.split(':')[0]))) {
      expect(r.stdout).toContain(topic);
    }
  });

  it.each(ids)('%s has a summary and at least one example', async (id) => {
    const cmd = manifest.commands[id];
    expect(cmd?.summary, `${id} has no summary`).toBeTruthy();
    expect(cmd?.examples?.length ?? 0, `${id} has no example`).toBeGreaterThan(0);
    if (FAST_PATHS.includes(id)) {
      const r = await runCli([...id.split(':'), '--help']);
      expect(r.exitCode).toBe(0);
      expect(r.stdout).toContain('EXAMPLES');
    } else {
      // run() throws where the binary would exit non-zero.
      expect(await oclifStdout([...id.split(':'), '--help'])).toContain('EXAMPLES');
    }
  });

  it.each(ids)('%s has a description beside its summary', (id) => {
    // The summary is one line; the description says what an operator needs beyond it (where values come from, what is refused).
    expect(manifest.commands[id]?.description, `${id} has no description`).toBeTruthy();
  });

  it('runs every fast path named here: a command bin/run.js answers itself is one of them', () => {
    const bin = readFileSync(join(REPO_ROOT, 'bin/run.js'), 'utf8');
    const answered = [...bin.matchAll(/argv\[0\] === '([\w-]+)' && argv\[1\] === '([\w-]+)'/g)].map((m) => `${m[1]}:${m[2]}`);
    expect(answered.sort()).toEqual([...FAST_PATHS].sort());
  });
});

describe('--version', () => {
  it('prints what oclif prints as the VERSION in --help', async () => {
    const [version, help] = await Promise.all([runCli(['--version']), rootHelp()]);
    expect(help.exitCode).toBe(0);
    expect(version.exitCode).toBe(0);
    const fromHelp = /^VERSION\n\s+(.+)$/m.exec(help.stdout)?.[1];
    expect(fromHelp).toMatch(/^llmgw\/\d+\.\d+\.\d+ linux-\w+ node-v\d+/);
    expect(version.stdout.trim()).toBe(fromHelp);
  });
});
