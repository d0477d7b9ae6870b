import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import { FaultHarness, freePort, processesWritingUnder } from '../faults/scenarios/fault-harness.js';
import { procInfo } from '../helpers/engine-processes.js';
import { simStart } from '../helpers/sim-shards.js';
import { expectAgentUnharmed } from './agent-unharmed.js';

const S = ShardState;
const STARTS = 20;

describe('concurrent StartShards of different ids on one GPU and one port (security review, finding 5)', () => {
  let h: FaultHarness | undefined;
  afterEach(async () => {
    await h?.close();
    h = undefined;
  });

  it('launches exactly one engine and refuses the other nineteen naming the shard that holds the GPU', async () => {
    h = new FaultHarness('core-race');
    await h.boot();
    const port = await freePort();
    const ids = Array.from({ length: STARTS }, (_, i) => `race${i}-g1-r0`);
    // One burst, as a hostile or buggy control plane sends them: the agent
    // handles each in the background, so all twenty validate at once.
    for (const id of ids) h.start(simStart(id, port, { gpu: 2 }));

    const final = await Promise.all(ids.map((id) => h?.waitShard(id, [S.READY, S.FAILED], 60_000)));
    const ready = final.filter((s) => s?.state === S.READY);
    expect(ready.map((s) => s?.shardId)).toHaveLength(1);
    const winner = ready[0]?.shardId as string;
    const refused = final.filter((s) => s?.state === S.FAILED);
    expect(refused).toHaveLength(STARTS - 1);
    for (const r of refused) expect(r?.error).toMatch(new RegExp(`(GPU 2 is held|http_port ${port} is already in use on this node) by shard ${winner}`));

    // "Ever": a launch opens the shard's log and writes its state file, so
    // one file of each means no other engine was started, even briefly.
    const logs = readdirSync(join(h.dirs.logDir, 'shards')).filter((n) => n.endsWith('.log'));
    expect(logs).toEqual([`${winner}.log`]);
    const states = readdirSync(join(h.dirs.stateDir, 'shards')).filter((n) => n.endsWith('.json'));
    expect(states).toEqual([`${winner}.json`]);
    const groups = new Set(processesWritingUnder(h.dirs.logDir).map((pid) => procInfo(pid)?.pgid));
    expect(groups.size).toBe(1);
    h.assertOneEnginePerShard();
    expectAgentUnharmed(h.agent?.pid ?? 0);
  }, 90_000);
});
