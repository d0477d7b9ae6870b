import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { REPO_ROOT, runCli } from '../helpers/run-cli.js';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-install-account-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('llmgw agent install-unit and the engine account (security review 2, N1)', () => {
  it('says which engines of the configuration have no account, which the root agent will refuse to start, and how to give them one', async () => {
    // The shipped example, as `agent example-config` writes it: node_id still empty, users empty.
    const config = join(dir, 'agent.yaml');
    writeFileSync(config, readFileSync(join(REPO_ROOT, 'examples/agent.yaml'), 'utf8'));
    const r = await runCli(['agent', 'install-unit', '--output', join(dir, 'a.service'), '--config', config]);
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stdout).toContain(
      `note: engines.vllm.user, engines.sglang.user are empty in ${config}: the agent runs as root and refuses to start those engines as root; create their account (useradd --system --create-home --home-dir /var/lib/llmgw-engine --shell /usr/sbin/nologin llmgw-engine) and set each to llmgw-engine`,
    );
    const json = await runCli(['agent', 'install-unit', '--output', join(dir, 'b.service'), '--config', config, '--json']);
    expect(JSON.parse(json.stdout).rootEngines).toEqual(['vllm', 'sglang']);
  });

  it('says nothing of engines that have an account or allow_root', async () => {
    const config = join(dir, 'ok.yaml');
    writeFileSync(config, 'node_id: n\nserver: https://cp:8443\nengines:\n  vllm: {user: nobody}\n  sglang: {allow_root: true}\n');
    const r = await runCli(['agent', 'install-unit', '--output', join(dir, 'c.service'), '--config', config, '--json']);
    expect(r.exitCode, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout).rootEngines).toEqual([]);
  });
});
