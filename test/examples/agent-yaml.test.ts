import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { CONFIG_KEYS } from '../../src/agent/config/config-keys.js';
import { loadAgentConfig } from '../../src/agent/config/load-agent-config.js';

const PATH = 'examples/agent.yaml';

describe('examples/agent.yaml', () => {
  it('loads without error', () => {
    expect(loadAgentConfig({ configPath: PATH, env: {} }).config.nodeId).toBe('gpu-node-01');
  });

  it('sets every key the agent knows, each under a comment', () => {
    const { sources } = loadAgentConfig({ configPath: PATH, env: {} });
    const lines = readFileSync(PATH, 'utf8').split('\n');
    for (const spec of CONFIG_KEYS) {
      const source = sources.get(spec.key);
      expect(source?.kind, `${spec.key} is not in ${PATH}`).toBe('file');
      const line = (source as { line: number }).line;
      expect(lines[line - 2]?.trim().startsWith('#') || lines[line - 2]?.trim().endsWith(':'), `${spec.key} has no comment above it`).toBe(true);
    }
  });
});
