import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ShardModelPins } from '../../../src/agent/models/shard-model-pins.js';
import { StartShardSchema } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { StoreLayout } from '../../../src/models/store-layout.js';

let dir: string;
let layout: StoreLayout;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'llmgw-pins-'));
  layout = new StoreLayout(dir);
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const spec = (shardId: string, model: string) => create(StartShardSchema, { shardId, profile: { model } });
const pinned = (repo: string, shard: string) => existsSync(join(dir, 'llmgw', 'pins', `models--${repo.replace('/', '--')}`, shard));

describe('ShardModelPins', () => {
  it("carries out one shard's pins and unpins in the order asked, however their disk writes interleave", async () => {
    const pins = new ShardModelPins(layout);
    // A run's end (unpin) asked while its start's pin is still being written.
    await Promise.all([pins.pin(spec('s1', 'acme/tiny')), pins.unpin('s1')]);
    expect(pinned('acme/tiny', 's1')).toBe(false);
    // The next run's start (pin) asked while the last run's unpin is still being written.
    await pins.pin(spec('s1', 'acme/tiny'));
    await Promise.all([pins.unpin('s1'), pins.pin(spec('s1', 'acme/tiny'))]);
    expect(pinned('acme/tiny', 's1')).toBe(true);
  });

  it("goes on after a failed step: a pin that cannot be written does not block the shard's next ones", async () => {
    const pins = new ShardModelPins(new StoreLayout(join(dir, 'missing', '\0bad')));
    await expect(pins.pin(spec('s1', 'acme/tiny'))).rejects.toThrow();
    await expect(pins.unpin('s1')).resolves.toBeUndefined();
  });
});
