import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { LogLineShaper } from '../../../src/lib/files/log-line-shaper.js';
import { lineTime } from '../../../src/lib/files/log-line-time.js';
import { chooseRun, findReplicaRuns } from '../../../src/lib/files/replica-runs.js';
import { shardFailurePath, shardLogPath } from '../../../src/lib/shard-layout.js';

const NOW = new Date(2026, 11, 2, 12, 0, 0).getTime();

describe('log line times', () => {
  it("reads RFC 3339, SGLang's and vLLM's stamps, and none from other lines", () => {
    expect(lineTime('2026-12-02T10:00:00.500Z started', NOW)).toBe(Date.parse('2026-12-02T10:00:00.500Z'));
    expect(lineTime('[2026-12-02 11:00:00] Load weight end.', NOW)).toBe(new Date(2026, 11, 2, 11, 0, 0).getTime());
    expect(lineTime('INFO 12-02 11:30:00 [api_server.py:1] pid 7', NOW)).toBe(new Date(2026, 11, 2, 11, 30, 0).getTime());
    expect(lineTime('Traceback (most recent call last):', NOW)).toBeUndefined();
  });

  it('--since drops older lines and their untimed continuations; --timestamps prefixes the time, "-" when unknown', () => {
    const shaper = new LogLineShaper({ sinceMs: new Date(2026, 11, 2, 11, 0, 0).getTime(), timestamps: true }, NOW);
    const out = shaper.apply(['INFO 12-02 10:00:00 [a.py:1] old', '  continued', 'INFO 12-02 11:30:00 [a.py:2] new', '  tail']);
    expect(out).toEqual([`${new Date(2026, 11, 2, 11, 30).toISOString()} INFO 12-02 11:30:00 [a.py:2] new`, `${new Date(2026, 11, 2, 11, 30).toISOString()}   tail`]);
    expect(new LogLineShaper({ timestamps: true }).apply(['no time'])).toEqual(['- no time']);
  });
});

describe('runs of a replica', () => {
  it('finds the run before, by the replica id in failure records, across shard ids', () => {
    const logDir = mkdtempSync(join(tmpdir(), 'llmgw-runs-'));
    onTestFinished(() => rmSync(logDir, { recursive: true, force: true }));
    mkdirSync(join(logDir, 'shards'));
    for (const [g, t] of [[1, '2026-12-02T10:00:00Z'], [2, '2026-12-02T10:01:00Z'], [3, '2026-12-02T10:02:00Z']] as const) {
      const id = `r-g${g}-r0`;
      writeFileSync(shardLogPath(logDir, id), `run ${g}\n`);
      writeFileSync(shardFailurePath(logDir, id), JSON.stringify({ shardId: id, replicaId: 'r', startedAt: t }));
    }
    const runs = findReplicaRuns({ logDir });
    const pick = (c: Parameters<typeof chooseRun>[2]) => {
      const r = chooseRun(runs, logDir, c);
      return 'run' in r ? r.run.shardId : r.why;
    };
    expect(pick({ replicaId: 'r', previous: true })).toBe('r-g2-r0');
    expect(pick({ replicaId: 'r', previous: false })).toBe('r-g3-r0');
    expect(pick({ shardId: 'r-g2-r0', previous: true })).toBe('r-g1-r0');
    expect(pick({ shardId: 'r-g1-r0', previous: true })).toMatch(/no run of replica r before shard r-g1-r0/);
    expect(pick({ replicaId: 'other', previous: true })).toMatch(/no run of replica other has a kept log/);
  });
});
