import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runCli } from '../../helpers/run-cli.js';

/*
 * `llmgw models` finds the agent's configuration as `llmgw ctl` does: --config,
 * else LLMGW_CONFIG, else /etc/llmgw/agent.yaml. So an operator who exported
 * LLMGW_CONFIG for ctl (dev up's printed paths; docs/local-cluster.md) lists
 * the same node's store without a flag.
 */

const dir = mkdtempSync(join(tmpdir(), 'llmgw-models-env-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function config(name: string, body: string): string {
  const path = join(dir, name);
  writeFileSync(path, body);
  return path;
}

const store = join(dir, 'store');
mkdirSync(store, { mode: 0o755 });
const withStore = config('with-store.yaml', `models:\n  cache_dir: ${store}\n  budget: 64MiB\n`);
const without = config('without.yaml', 'log_level: info\n');

describe('llmgw models list', () => {
  it('takes the configuration LLMGW_CONFIG names', async () => {
    const r = await runCli(['models', 'list', '--json'], { env: { LLMGW_CONFIG: withStore } });
    expect(r.exitCode, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ cacheDir: store, models: [] });
  });

  it('lets --config win over LLMGW_CONFIG, and names the file it read when it has no store', async () => {
    const flag = await runCli(['models', 'list', '--json', '--config', withStore], { env: { LLMGW_CONFIG: without } });
    expect(flag.exitCode, flag.stderr).toBe(0);
    const env = await runCli(['models', 'list'], { env: { LLMGW_CONFIG: without } });
    expect(env.exitCode).toBe(78);
    expect(env.stderr).toContain(`models.cache_dir is not set in ${without}`);
  });
});
