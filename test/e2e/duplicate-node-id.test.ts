import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { type AgentDirs, agentDirs, cleanUpEnginesAfterTest, startAgentProcess } from '../helpers/agent-process.js';
import { captureLogger } from '../helpers/capture-logger.js';
import { until } from '../helpers/engine-processes.js';
import { startControlPlane } from '../helpers/start-control-plane.js';
import { TINY_DEPLOYMENT } from '../helpers/tiny-deployment.js';


/** Safety net; never reached when things work. */
const TEST_TIMEOUT_MS = 90_000;
/** How long the test watches for flapping once the second agent is refused: many of its reconnect attempts. */
const WATCH_MS = 4_000;

const roots: string[] = [];
afterAll(() => {
  for (const root of roots) rmSync(root, { recursive: true, force: true });
});

function newDirs(): AgentDirs {
  const dirs = agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-dup-')));
  roots.push(dirs.root);
  cleanUpEnginesAfterTest(dirs);
  return dirs;
}

const mentionsDuplicate = (r: Record<string, unknown>) => typeof r.err === 'string' && /node dev-node is already connected from 127\.0\.0\.1:\d+, since \d{4}-/.test(r.err);

describe('two agents with the same node_id', () => {
  it('refuses the second with a reason both logs show, and the first keeps its replica without a flap', { timeout: TEST_TIMEOUT_MS }, async () => {
    const { logger, records } = captureLogger('info');
    const first = 20_000 + Math.floor(Math.random() * 400) * 20;
    const { cp, url } = await startControlPlane({ deployment: TINY_DEPLOYMENT, logger, portRange: [first, first + 19], retryBackoffMs: 500 });
    const a = startAgentProcess({ server: url, dirs: newDirs(), nodeId: 'dev-node' });
    await until(() => cp.replicas()[0]?.phase === 'ready', 'the first agent to serve the replica', 60_000);
    const shardId = cp.replicas()[0]?.shards[0]?.shardId;

    const b = startAgentProcess({ server: url, dirs: newDirs(), nodeId: 'dev-node' });
    await until(() => b.logs().some(mentionsDuplicate), "the second agent to log the control plane's reason", 30_000);
    expect(records.some((r) => r.msg === 'refused a second agent with the same node_id' && mentionsDuplicate(r))).toBe(true);
    const refusedAt = records.length;
    await sleep(WATCH_MS);

    // Nothing the second agent sent reached the node: no re-registration, no failure, same shard.
    const later = records.slice(refusedAt).map((r) => r.msg);
    expect(later).not.toContain('node re-registered');
    expect(later).not.toContain('node disconnected; its shards are kept');
    expect(records.some((r) => String(r.msg).startsWith('replica failed'))).toBe(false);
    expect(cp.replicas()[0]).toMatchObject({ phase: 'ready', generation: 1 });
    expect(cp.replicas()[0]?.shards[0]?.shardId).toBe(shardId);
    expect(cp.nodes().find((n) => n.id === 'dev-node')?.connected).toBe(true);
    expect(a.logs().some((r) => r.msg === 'cannot reach the control plane; retrying')).toBe(false);
    // Still refused on every retry, not let in after a few.
    expect(b.logs().filter(mentionsDuplicate).length).toBeGreaterThan(1);
  });
});
