import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadAgentConfig } from '../../../src/agent/config/load-agent-config.js';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-disk-pressure-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function load(diskPressure: string) {
  const path = join(dir, 'agent.yaml');
  writeFileSync(path, `node_id: n1\nserver: http://127.0.0.1:1\nsupervisor:\n  disk_pressure:\n${diskPressure}`);
  return () => loadAgentConfig({ configPath: path, env: {} }).config.supervisor.diskPressure;
}

describe('supervisor.disk_pressure', () => {
  it('defaults to 1 GiB, 5% of inodes, every 10 s (kubelet-like)', () => {
    expect(load('    {}\n')()).toEqual({ minFree: 1024 ** 3, minFreeInodes: 0.05, intervalMs: 10_000 });
  });

  it('takes sizes, shares and durations as the rest of the config spells them', () => {
    expect(load('    min_free: 512MiB\n    min_free_inodes: 0.1\n    interval: 0s\n')()).toEqual({ minFree: 512 * 1024 ** 2, minFreeInodes: 0.1, intervalMs: 0 });
  });

  it.each([
    ['    min_free: lots\n', /supervisor\.disk_pressure\.min_free.*"lots" is not a size/],
    ['    min_free: 0\n', /supervisor\.disk_pressure\.min_free.*is not a size/],
    ['    min_free_inodes: 5\n', /supervisor\.disk_pressure\.min_free_inodes.*not a share; write it like 5% or 0.05/],
    ['    min_free_inodes: 150%\n', /supervisor\.disk_pressure\.min_free_inodes.*not a share/],
    ['    interval: soon\n', /supervisor\.disk_pressure\.interval.*not a duration/],
  ])('refuses %j in one line, exit 78', (yaml, message) => {
    let err: unknown;
    try {
      load(yaml)();
    } catch (e) {
      err = e;
    }
    expect(err).toMatchObject({ exitCode: 78, message: expect.stringMatching(message) });
    expect((err as Error).message).not.toContain('\n');
  });
});
