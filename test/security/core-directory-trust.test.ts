import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { agentConfigYaml, agentDirs } from '../helpers/agent-config-yaml.js';
import { runCli } from '../helpers/run-cli.js';

let root: string;
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'llmgw-core-trust-'));
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

/** The real agent against directories set up by `prepare`; nothing listens at the server, it must not get that far. */
async function runAgentWith(prepare: (dirs: ReturnType<typeof agentDirs>) => void) {
  const dirs = agentDirs(root);
  prepare(dirs);
  const config = join(root, 'agent.yaml');
  writeFileSync(config, agentConfigYaml({ server: 'http://127.0.0.1:9', dirs }));
  return { dirs, result: await runCli(['agent', 'run', '--config', config]) };
}

describe('directories others can write to are refused at start (security review, finding 9)', () => {
  it('exits 78 with one line naming a log_dir owned by nobody, before creating anything in it', async () => {
    const { dirs, result } = await runAgentWith((d) => {
      mkdirSync(d.logDir);
      chownSync(d.logDir, 65534, 65534);
    });
    expect(result.exitCode).toBe(78);
    expect(result.stderr.trim().split('\n')).toHaveLength(1);
    expect(result.stderr).toMatch(`supervisor.log_dir: directory ${dirs.logDir} is owned by uid 65534, not root`);
    expect(existsSync(join(dirs.logDir, 'shards'))).toBe(false);
    expect(existsSync(dirs.socket)).toBe(false);
  });

  it('exits 78 naming a world-writable state_dir', async () => {
    const { dirs, result } = await runAgentWith((d) => {
      mkdirSync(d.stateDir);
      chmodSync(d.stateDir, 0o777);
    });
    expect(result.exitCode).toBe(78);
    expect(result.stderr).toMatch(`supervisor.state_dir: directory ${dirs.stateDir} is writable by group or others (mode 0777`);
  });

  it('exits 78 naming a group-writable parent of the agent directories', async () => {
    const { result } = await runAgentWith((d) => {
      chmodSync(d.root, 0o770);
    });
    expect(result.exitCode).toBe(78);
    expect(result.stderr).toMatch(`directory ${root} is writable by group or others (mode 0770`);
  });
});
