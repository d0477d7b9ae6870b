import { execa } from 'execa';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, REPO_ROOT } from '../helpers/run-cli.js';

/*
 * --help's examples, run as an operator pastes them (a shell line, with the
 * repo's binary for `llmgw`): an example that fails as written teaches the
 * wrong thing. Those here write nothing outside a temporary directory and
 * need no agent.
 */
const manifest = JSON.parse(readFileSync(join(REPO_ROOT, 'oclif.manifest.json'), 'utf8')) as {
  commands: Record<string, { examples?: (string | { command: string })[] }>;
};

/** The example of `id` that contains `marker`, as a shell line. */
function example(id: string, marker: string): string {
  const found = (manifest.commands[id]?.examples ?? []).map((e) => (typeof e === 'string' ? e : e.command)).find((e) => e.includes(marker));
  if (!found) throw new Error(`${id} has no example with ${marker}`);
  return found;
}

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'llmgw-help-examples-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Runs `line` in bash with `llmgw` as this repo's binary, /tmp/ as a directory of the test's own, and an empty home. */
async function runExample(line: string, env: Record<string, string> = {}) {
  // /tmp/ first: the repo itself may be under /tmp (a fresh clone), and its binary's path must stay as it is.
  const script = line.replaceAll('/tmp/', `${dir}/`).replaceAll('<%= config.bin %>', `${process.execPath} ${BIN}`);
  const r = await execa('bash', ['-o', 'pipefail', '-c', script], { reject: false, cwd: REPO_ROOT, env: { HOME: dir, XDG_CONFIG_HOME: join(dir, 'config'), NO_COLOR: '1', ...env }, timeout: 60_000 });
  return { exitCode: r.exitCode ?? -1, stdout: String(r.stdout), stderr: String(r.stderr) };
}

describe('examples in --help, as written', () => {
  it('agent run --print-config --json with LLMGW_SERVER prints the effective config, not an error', async () => {
    const line = example('agent:run', '--print-config --json');
    const r = await runExample(line);
    expect(r.stderr).toBe('');
    expect(r.exitCode).toBe(0);
    const out = JSON.parse(r.stdout);
    expect(out.error).toBeUndefined();
    expect(out.effective).toMatchObject({ nodeId: 'gpu-node-01', server: 'http://127.0.0.1:8443' });
  });

  it.skipIf(!hasSystemdAnalyze())('agent install-unit --output … && systemd-analyze verify passes', async () => {
    const r = await runExample(example('agent:install-unit', 'systemd-analyze verify'));
    expect(r.stderr).toBe('');
    expect(r.exitCode).toBe(0);
  });
});

/** Whether systemd-analyze is on PATH (it is not in every CI image). */
function hasSystemdAnalyze(): boolean {
  return (process.env.PATH ?? '').split(':').some((p) => p !== '' && existsSync(join(p, 'systemd-analyze')));
}
