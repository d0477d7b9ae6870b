import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { CONFIG_KEYS } from '../../src/agent/config/config-keys.js';
import { ENGINE_KEYS } from '../../src/agent/config/parse-engines-config.js';
import { parse } from 'yaml';
import { loadAgentConfig } from '../../src/agent/config/load-agent-config.js';

const PATH = 'examples/agent.yaml';
const dir = mkdtempSync(join(tmpdir(), 'llmgw-example-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The example as an operator edits it: node_id set, every line where it was. */
function edited(): string {
  const path = join(dir, 'agent.yaml');
  const text = readFileSync(PATH, 'utf8');
  expect(text).toMatch(/^node_id: ""$/m);
  writeFileSync(path, text.replace(/^node_id: ""$/m, 'node_id: gpu-node-01'));
  return path;
}

describe('examples/agent.yaml', () => {
  it('refuses to start unedited (exit 78, saying to set node_id): a fleet of unedited copies would register as one node', () => {
    expect(() => loadAgentConfig({ configPath: PATH, env: {} })).toThrow(
      expect.objectContaining({ exitCode: 78, message: `node_id is required (set it in ${PATH}, LLMGW_NODE_ID, --node-id)` }),
    );
  });

  it('loads without error once node_id is set', () => {
    expect(loadAgentConfig({ configPath: edited(), env: {} }).config.nodeId).toBe('gpu-node-01');
  });

  it('sets every key the agent knows, each under a comment', () => {
    const { sources } = loadAgentConfig({ configPath: edited(), env: {} });
    const lines = readFileSync(PATH, 'utf8').split('\n');
    for (const spec of CONFIG_KEYS) {
      const source = sources.get(spec.key);
      expect(source?.kind, `${spec.key} is not in ${PATH}`).toBe('file');
      const line = (source as { line: number }).line;
      expect(lines[line - 2]?.trim().startsWith('#') || lines[line - 2]?.trim().endsWith(':'), `${spec.key} has no comment above it`).toBe(true);
    }
  });

  it('sets every engine key each engine takes, allow_sleep_mode (off) for vLLM included (walkthrough 4, O9)', () => {
    const engines = (parse(readFileSync(PATH, 'utf8')) as { engines: Record<string, Record<string, unknown>> }).engines;
    // allow_sleep_mode is vLLM's alone (SGLang's sleep opens nothing unguarded); the sim's block sets only what a sim reads.
    expect(Object.keys(engines.vllm ?? {}).sort()).toEqual([...ENGINE_KEYS].sort());
    expect(Object.keys(engines.sglang ?? {}).sort()).toEqual(ENGINE_KEYS.filter((k) => k !== 'allow_sleep_mode').sort());
    expect(engines.vllm?.allow_sleep_mode).toBe(false);
    expect(readFileSync(PATH, 'utf8')).toMatch(/^# .*allow_sleep_mode \(vllm\n# only/m);
  });
});
