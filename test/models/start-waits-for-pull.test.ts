import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { create } from '@bufbuild/protobuf';
import { durationFromMs } from '@bufbuild/protobuf/wkt';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeModels, StartCancelledError } from '../../src/agent/models/node-models.js';
import { StartShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { lockModel } from '../../src/models/model-lock.js';
import { StoreLayout } from '../../src/models/store-layout.js';
import { captureLogger } from '../helpers/capture-logger.js';

/*
 * The bounds of a start's wait for its model's pull (NodeModels.waitForPull):
 * the shard's startup_timeout refuses it naming the pull, a StopShard ends it
 * quietly, and a model nobody pulls costs no wait at all. The pull here is a
 * held model lock, as `llmgw models pull` in a shell holds it.
 */

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'llmgw-start-wait-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

function models(): NodeModels {
  return new NodeModels({
    models: { cacheDir: dir, budget: 1e9, hub: { endpoint: 'http://127.0.0.1:9', tokenFile: '' }, maxConcurrent: 1 },
    configPath: 'test',
    send: () => {},
    onChange: () => {},
    refreshIntervalMs: 60_000,
    logger: captureLogger().logger,
  });
}

const start = (shardId: string, timeoutMs?: number) =>
  create(StartShardSchema, { shardId, replicaId: 'r', profile: { engine: 'sim', model: 'acme/tiny', ...(timeoutMs ? { startupTimeout: durationFromMs(timeoutMs) } : {}) } });

describe('a start of a model being pulled', () => {
  it('is refused naming the pull once its startup_timeout runs out', async () => {
    const held = await lockModel(new StoreLayout(dir), 'acme/tiny', AbortSignal.timeout(5_000));
    try {
      await expect(models().waitForPull(start('s1', 300))).rejects.toThrow(/acme\/tiny was still being pulled .* after 0.3s, the shard's startup_timeout/);
    } finally {
      held.release();
    }
  });

  it('is refused at its startup_timeout even when the garbage collector runs while it waits', async () => {
    // nodejs/node#57736: the AbortSignal.timeout() this wait used to combine
    // through AbortSignal.any() was collected before it fired, and the start
    // waited for ever (issue 36 item 9: no status 62 s after a 45 s limit).
    const held = await lockModel(new StoreLayout(dir), 'acme/tiny', AbortSignal.timeout(10_000));
    const m = models();
    const gcs = setInterval(gc, 5);
    try {
      await expect(m.waitForPull(start('s1', 300))).rejects.toThrow(/after 0.3s, the shard's startup_timeout/);
    } finally {
      clearInterval(gcs);
      held.release();
      m.close();
    }
  }, 15_000);

  it('gives up quietly when the shard is stopped, and goes on when the pull ends', async () => {
    const held = await lockModel(new StoreLayout(dir), 'acme/tiny', AbortSignal.timeout(5_000));
    const m = models();
    try {
      const stopped = m.waitForPull(start('s1'));
      const waiting = m.waitForPull(start('s2'));
      m.cancelWait('s1');
      await expect(stopped).rejects.toBeInstanceOf(StartCancelledError);
      held.release();
      await expect(waiting).resolves.toBeUndefined();
    } finally {
      held.release();
      m.close();
    }
  });

  it('does not wait at all for a model nobody pulls, or one that is not a hub id', async () => {
    const m = models();
    await m.waitForPull(start('s1', 100));
    await m.waitForPull(create(StartShardSchema, { shardId: 's2', profile: { engine: 'sim', model: '/srv/models/local' } }));
    m.close();
  });
});
