import { describe, it, type TestContext } from 'vitest';
import { supervisorsOf } from '../../helpers/use-supervisors.js';
import type { SupervisorConfig } from '../../../src/agent/config/agent-config.js';
import type { ShardTransition } from '../../../src/agent/supervisor/shard/shard-snapshot.js';
import type { Supervisor } from '../../../src/agent/supervisor/supervisor.js';
import { ShardState } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { freePort, isRunning, shardSpec, simPlan, simWatch, until } from '../../helpers/engine-processes.js';
import { parseShardId } from '../../../src/lib/shard-id.js';

/*
 * Issue 16's acceptance for stall detection, through the real path: a sim
 * engine launched by the supervisor, its /metrics read by the shard
 * runner's health watch by the names the sim engine class declares.
 *
 * The tests run side by side (describe.concurrent): most of each is a wait
 * (for a stall, or watching that none is called), which they now wait out
 * together. Each ends only its own supervisors, engines and requests
 * (supervisorsOf), and takes expect from its context: vitest tracks no
 * concurrent test in its globals.
 */

async function readySim(sup: Supervisor, id: string, args: string[]) {
  const port = await freePort();
  const { shard } = await sup.start(shardSpec(id, port), {
    plan: simPlan(['--port', String(port), ...args]),
    servesHttp: true,
    watch: simWatch(port),
  });
  await sup.settle(parseShardId(id), { timeoutMs: 30_000 });
  return { shard, baseUrl: `http://127.0.0.1:${port}` };
}

/** `n` concurrent streaming chat requests that run until the test ends (or `ac` aborts). */
function chatLoad(ctx: TestContext, baseUrl: string, n: number, ac = new AbortController()): AbortController {
  ctx.onTestFinished(() => ac.abort());
  const body = JSON.stringify({ model: 'sim-model', messages: [{ role: 'user', content: 'hi' }], max_tokens: 100_000, stream: true });
  for (let i = 0; i < n; i++) {
    void fetch(`${baseUrl}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body, signal: ac.signal })
      .then((r) => r.text())
      .catch(() => undefined);
  }
  return ac;
}

function recordTransitions(sup: Supervisor): ShardTransition[] {
  const seen: ShardTransition[] = [];
  sup.on('transition', (t) => seen.push(t));
  return seen;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.concurrent('stall detection of a READY shard', () => {
  it('reports a sim that stalls under load UNHEALTHY with the stall as its error, keeps its pid, and READY again once idle', async (ctx) => {
    const { expect } = ctx;
    const healthIntervalMs = 500;
    const stallTimeoutMs = 2000;
    const sup = supervisorsOf(ctx).newSupervisor({ healthIntervalMs, stallTimeoutMs } satisfies Partial<SupervisorConfig>);
    const seen = recordTransitions(sup);
    const { shard, baseUrl } = await readySim(sup, 'stalls', ['--stall-after', '2s', '--token-latency', '20ms']);
    const load = chatLoad(ctx, baseUrl, 3);
    await until(() => sup.get(parseShardId('stalls'))?.state === ShardState.UNHEALTHY, 'the stall to be reported', 60_000);
    const unhealthy = sup.get(parseShardId('stalls'));
    const stalledAt = (await sup.tailLog(parseShardId('stalls'), 200)).find((l) => /made no progress/.test(l));
    console.info(`stall reported as "${unhealthy?.error}" (sim: ${stalledAt?.slice(0, 23)}; reported ${new Date().toISOString()})`);
    // The detector's own clock, from the last sample that saw tokens move:
    // it fires at the first tick past stall_timeout, so within stall_timeout
    // + 2 health intervals (2.0 s..3.0 s here, printed in whole seconds).
    const limitS = Math.floor((stallTimeoutMs + 2 * healthIntervalMs) / 1000);
    const m = /^stalled: 3 requests running, no token generated for (\d+) s$/.exec(unhealthy?.error ?? '');
    expect(m, unhealthy?.error).not.toBeNull();
    expect(Number(m?.[1])).toBeGreaterThanOrEqual(stallTimeoutMs / 1000);
    expect(Number(m?.[1])).toBeLessThanOrEqual(limitS);
    const report = seen.find((t) => t.to === ShardState.UNHEALTHY);
    expect(report?.shard.error).toMatch(/^stalled: /);
    // Reported, never killed: the control plane decides.
    expect(unhealthy?.pid).toBe(shard.pid);
    expect(isRunning(shard.pid)).toBe(true);
    expect((await fetch(`${baseUrl}/health`)).status).toBe(200);

    // The requests give up: nothing running, nothing owed, READY again.
    load.abort();
    await until(() => sup.get(parseShardId('stalls'))?.state === ShardState.READY, 'READY once idle', 30_000);
    expect(sup.get(parseShardId('stalls'))?.error).toBe('');
    expect(seen.map((t) => ShardState[t.to])).toEqual(['STARTING', 'READY', 'UNHEALTHY', 'READY']);
  });

  it('raises no alarm on an idle engine, however long its token counter is flat', async (ctx) => {
    const { expect } = ctx;
    const sup = supervisorsOf(ctx).newSupervisor({ healthIntervalMs: 200, stallTimeoutMs: 1000 });
    const seen = recordTransitions(sup);
    await readySim(sup, 'idle', []);
    await sleep(4000);
    expect(seen.map((t) => ShardState[t.to])).toEqual(['STARTING', 'READY']);
  });

  // Scaled from a token every 2.5 s under a 5 s stall_timeout, watched 10 s, by 3/5: the ratios the judgement
  // rests on kept (a flat stretch of half the timeout, watched twice the timeout, 24 health reads), and 1.5 s
  // of margin left for a loaded machine to delay a token or a read before a stretch looks as long as the timeout.
  it('raises no alarm on a slow engine that makes a token every 1.5 s, half its stall_timeout', async (ctx) => {
    const { expect } = ctx;
    const sup = supervisorsOf(ctx).newSupervisor({ healthIntervalMs: 250, stallTimeoutMs: 3000 });
    const seen = recordTransitions(sup);
    const { baseUrl } = await readySim(sup, 'slow', ['--token-latency', '1500ms']);
    chatLoad(ctx, baseUrl, 2);
    await until(async () => (await sup.inFlight(parseShardId('slow'))) === 2, 'two requests running');
    // Past stall_timeout twice over: a flat stretch of 1.5 s is slow, not stalled.
    await sleep(6_000);
    expect(seen.map((t) => ShardState[t.to])).toEqual(['STARTING', 'READY']);
  });

  it('never judges stalls with stall_timeout 0s', async (ctx) => {
    const { expect } = ctx;
    const sup = supervisorsOf(ctx).newSupervisor({ healthIntervalMs: 200, stallTimeoutMs: 0 });
    const seen = recordTransitions(sup);
    const { baseUrl } = await readySim(sup, 'off', ['--stall-after', '0s']);
    chatLoad(ctx, baseUrl, 2);
    await until(async () => (await sup.inFlight(parseShardId('off'))) === 2, 'two requests running');
    await sleep(2000);
    expect(seen.map((t) => ShardState[t.to])).toEqual(['STARTING', 'READY']);
  });
});
