import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { SupervisorConfig } from '../../../src/agent/config/agent-config.js';
import { ShardLogHousekeeping } from '../../../src/agent/supervisor/shard-log-housekeeping.js';
import type { ShardRunner } from '../../../src/agent/supervisor/shard/shard-runner.js';
import { ShardState } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { agentUids } from '../../../src/lib/process/process-table.js';
import { captureLogger } from '../../helpers/capture-logger.js';

/*
 * The log check stats every shard's log at once (one wake of the agent
 * for them all, not one each: bench figures 5b and 16) and rotates, one
 * after the other, the ones over the cap; a log whose stat fails is still
 * handed to the rotation, which says why, and costs the others nothing.
 */

const CHECK_MS = 50;
const MAX_BYTES = 1000;
const WAIT = { timeout: 10_000, interval: 20 };
const roots: string[] = [];
afterEach(() => {
  for (const r of roots.splice(0)) rmSync(r, { recursive: true, force: true });
});

function runner(id: string, logPath: string, state = ShardState.READY, running = true): ShardRunner {
  return { shardId: id, replicaId: `r-${id}`, pid: 1, logPath, currentState: state, running } as unknown as ShardRunner;
}

describe('ShardLogHousekeeping log check', () => {
  it('rotates the logs over the cap among many under it, skips ended shards, and warns of a log it cannot read', async () => {
    const root = mkdtempSync(join(tmpdir(), 'llmgw-housekeeping-'));
    roots.push(root);
    const runners = new Map<string, ShardRunner>();
    const big = new Set(['s3', 's7']);
    for (let i = 0; i < 10; i++) {
      const id = `s${i}`;
      const log = join(root, `${id}.log`);
      writeFileSync(log, 'x'.repeat(big.has(id) ? MAX_BYTES + 500 : 10));
      runners.set(id, runner(id, log));
    }
    // Ended and not running: its log is left as it is.
    const endedLog = join(root, 'gone.log');
    writeFileSync(endedLog, 'x'.repeat(MAX_BYTES + 500));
    runners.set('gone', runner('gone', endedLog, ShardState.STOPPED, false));
    // A log whose path cannot be stat'ed (its folder is a file): ENOTDIR.
    writeFileSync(join(root, 'not-a-dir'), '');
    runners.set('bad', runner('bad', join(root, 'not-a-dir', 'bad.log')));
    const { logger, records } = captureLogger('info');
    const h = new ShardLogHousekeeping({
      config: { logMaxBytes: MAX_BYTES, logDir: root } as SupervisorConfig,
      log: logger,
      engineUids: agentUids(),
      runners,
      isClaimed: () => false,
      logCheckIntervalMs: CHECK_MS,
    });
    try {
      await vi.waitFor(() => expect(records.filter((r) => r.msg === 'rotated shard log').map((r) => r.shard).sort()).toEqual(['s3', 's7']), WAIT);
      await vi.waitFor(() => expect(records.find((r) => r.msg === 'rotating shard log failed' && r.shard === 'bad')?.err).toMatch(/ENOTDIR/), WAIT);
      for (const id of big) {
        expect(statSync(join(root, `${id}.log`)).size).toBe(0);
        expect(readFileSync(join(root, `${id}.log.1`), 'utf8')).toHaveLength(MAX_BYTES + 500);
      }
      for (let i = 0; i < 10; i++) if (!big.has(`s${i}`)) expect(statSync(join(root, `s${i}.log`)).size).toBe(10);
      expect(statSync(endedLog).size).toBe(MAX_BYTES + 500);
    } finally {
      h.close();
    }
  });
});
