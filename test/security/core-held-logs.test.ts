import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, constants, mkdirSync, openSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import { readProcStat } from '../../src/lib/process/proc-stat.js';
import { FaultHarness, freePort, until } from '../faults/scenarios/fault-harness.js';
import { isRunning } from '../helpers/engine-processes.js';
import { simStart } from '../helpers/sim-shards.js';
import { expectAgentUnharmed } from './agent-unharmed.js';

const S = ShardState;
const NOBODY = '65534';

describe('a local user holding old shard logs open on fd 1 (security review, finding 4)', () => {
  let h: FaultHarness | undefined;
  const holders: ChildProcess[] = [];
  afterEach(async () => {
    for (const c of holders.splice(0)) {
      try {
        process.kill(-(c.pid as number), 'SIGKILL');
      } catch {}
    }
    await h?.close();
    h = undefined;
  });

  it('neither blocks those shards nor delays start-up, and the holders are not killed', async () => {
    h = new FaultHarness('core-held');
    const shards = join(h.dirs.logDir, 'shards');
    mkdirSync(shards, { recursive: true, mode: 0o750 });
    // Not GPUs 3 and 4: the fake box has memory nobody lists on them, which a start is refused for.
    const gpus = [0, 1, 2, 5, 6];
    const ids = gpus.map((i) => `h${i}-g1-r0`);
    for (const id of ids) {
      const log = join(shards, `${id}.log`);
      // Old logs of stopped shards; opened read-only and handed to nobody as
      // fd 1, which is what the review's attacker did with world-readable logs.
      writeFileSync(log, 'an old run\n', { mode: 0o644 });
      const fd = openSync(log, constants.O_RDONLY);
      try {
        // As nobody, in a session of its own, deaf to SIGTERM; from / so that
        // it needs nothing of the checkout (which may be unreadable to nobody).
        const child = spawn(
          'setpriv',
          [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, '--clear-groups', 'setsid', 'sh', '-c', 'trap "" TERM; exec sleep 3000'],
          { stdio: ['ignore', fd, 'ignore'], cwd: '/' },
        );
        child.unref();
        holders.push(child);
      } finally {
        closeSync(fd);
      }
    }
    await until(() => holders.every((c) => readProcStat(c.pid as number)?.comm === 'sleep'), 'the holders to run as sleep');

    // stop_grace is 3s: killed one at a time, five holders would hold Register
    // up for 15s; the proof below is that no kill is even attempted.
    await h.boot();
    const logs = h.agent?.logs() ?? [];
    expect(logs.filter((r) => String(r.msg).includes('cannot be identified') || String(r.msg).includes('nothing can describe'))).toEqual([]);
    for (const c of holders) expect(isRunning(c.pid as number)).toBe(true);

    const ports = await Promise.all(ids.map(() => freePort()));
    // Waiting from before the starts: a status that arrived earlier is not seen.
    const settled = Promise.all(ids.map((id) => h?.waitShard(id, [S.READY, S.FAILED], 60_000)));
    for (const [i, id] of ids.entries()) h.start(simStart(id, ports[i] as number, { gpu: gpus[i] as number }));
    const final = await settled;
    expect(final.map((s) => [s?.shardId, S[s?.state ?? 0], s?.error])).toEqual(ids.map((id) => [id, 'READY', '']));
    for (const c of holders) expect(isRunning(c.pid as number)).toBe(true);
    // The engines write the same logs, now root:0640 in a 0750 directory (findings 8, 9).
    expect(statSync(shards).mode & 0o777).toBe(0o750);
    for (const id of ids) expect(statSync(join(shards, `${id}.log`)).mode & 0o777).toBe(0o640);
    expectAgentUnharmed(h.agent?.pid ?? 0);
  }, 120_000);
});
