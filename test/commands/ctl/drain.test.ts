import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { ShardState } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { type CtlFixture, NODE_ID, startCtlFixture } from '../../helpers/ctl-fixture.js';
import { freePort, until } from '../../helpers/engine-processes.js';
import { runCli } from '../../helpers/run-cli.js';
import { shardIs, simStart } from '../../helpers/sim-shards.js';

let fx: CtlFixture;
const ports: Record<string, number> = {};

beforeAll(async () => {
  fx = await startCtlFixture();
  for (const [id, latency] of [
    ['idle', '10ms'],
    ['busy', '100ms'],
    ['slow', '1s'],
    ['idle2', '10ms'],
  ] as const) {
    ports[id] = (await fx.startShard(id, ['--load-time', '200ms', '--token-latency', latency])).port;
  }
}, 90_000);
afterAll(() => fx?.close());

/** Requests the engine holds for maxTokens × its token latency; aborted when the test ends. */
function holdRequests(id: string, n: number, maxTokens: number): Promise<number[]> {
  const abort = new AbortController();
  onTestFinished(() => abort.abort());
  return Promise.all(
    Array.from({ length: n }, () =>
      fetch(`http://127.0.0.1:${ports[id]}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', prompt: 'hello', max_tokens: maxTokens }),
        signal: abort.signal,
      })
        .then(async (r) => {
          await r.text();
          return r.status;
        })
        .catch(() => -1),
    ),
  );
}

async function running(id: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${ports[id]}/metrics`)).text();
  return Number(/^vllm:num_requests_running(?:\{[^}]*\})? (\S+)$/m.exec(text)?.[1] ?? Number.NaN);
}

describe('llmgw ctl drain', () => {
  it('marks the shard DRAINING, reported to the control plane, and prints its in-flight count', async () => {
    const reported = fx.cp.waitFor(NODE_ID, shardIs('idle', ShardState.DRAINING), 10_000);
    const r = await runCli(['ctl', 'drain', 'idle', '--socket', fx.socket]);
    expect(r.stderr).toBe('');
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toBe('idle: DRAINING, 0 in flight\nDRAINING: the control plane routes new requests elsewhere; --wait waits for the rest to finish');
    await reported;
  });

  it('--wait shows the in-flight count going to zero and exits 0; the requests complete', async () => {
    // About 5 s each: long enough to still be running when a CLI started on a loaded machine first looks.
    const requests = holdRequests('busy', 3, 50);
    await until(async () => (await running('busy')) === 3, 'three requests in flight on busy');
    const r = await runCli(['ctl', 'drain', 'busy', '--wait', '--timeout', '1m', '--socket', fx.socket]);
    expect(r.exitCode).toBe(0);
    expect(r.stderr).toMatch(/busy: DRAINING, [123] in flight/);
    expect(r.stderr).toContain('busy: DRAINING, 0 in flight');
    // stderr is a pipe here: plain lines, one per change, no listr glyphs.
    expect(r.stderr).not.toMatch(/[✔❯›✖]/);
    expect(r.stderr.trimEnd().split('\n').every((l) => /^busy: DRAINING, \d+ in flight$/.test(l))).toBe(true);
    expect(r.stdout).toBe('drained\nbusy: DRAINING, 0 in flight');
    expect(await requests).toEqual([200, 200, 200]);
  });

  it('--wait exits 1 at the timeout, naming the requests left', async () => {
    void holdRequests('slow', 1, 1000);
    await until(async () => (await running('slow')) === 1, 'a request in flight on slow');
    const r = await runCli(['ctl', 'drain', 'slow', '--wait', '--timeout', '2s', '--socket', fx.socket]);
    expect(r.exitCode).toBe(1);
    expect(r.stderr).toContain('slow: DRAINING, 1 in flight');
    expect(r.stderr).not.toMatch(/[✔❯›✖]/);
    expect(r.stderr.trimEnd().split('\n').at(-1)).toBe('error: timed out after 2s: slow has 1 requests in flight; the shards stay DRAINING');

    // With --json the timeout is reported as every error is (BaseCommand.catch), the last DrainResponse with it.
    const json = await runCli(['ctl', 'drain', 'slow', '--wait', '--timeout', '1s', '--json', '--socket', fx.socket]);
    expect(json.exitCode).toBe(1);
    expect(JSON.parse(json.stdout)).toEqual({
      error: {
        kind: 'failure',
        message: 'timed out after 1s: slow has 1 requests in flight; the shards stay DRAINING',
        exitCode: 1,
        drain: { shards: [{ shardId: 'slow', state: 'SHARD_STATE_DRAINING', inFlight: 1, countable: true }], drained: false, timedOut: true },
      },
    });
    expect(json.stderr).toBe('error: timed out after 1s: slow has 1 requests in flight; the shards stay DRAINING');
  });

  it('refuses --timeout 0s in the same words as every duration flag, exit 2', async () => {
    const r = await runCli(['ctl', 'drain', 'slow', '--wait', '--timeout', '0s', '--socket', fx.socket]);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toBe('error: --timeout must be more than 0, got "0s"');
    const bad = await runCli(['ctl', 'drain', 'slow', '--wait', '--timeout', 'forever', '--socket', fx.socket]);
    expect(bad.stderr).toBe('error: --timeout "forever" is not a duration; write it like 500ms, 5s or 2m');
  });

  it('--json prints the last DrainResponse as proto JSON', async () => {
    const r = await runCli(['ctl', 'drain', 'idle2', '--wait', '--json', '--socket', fx.socket]);
    expect(r.exitCode).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({
      shards: [{ shardId: 'idle2', state: 'SHARD_STATE_DRAINING', inFlight: 0, countable: true }],
      drained: true,
      timedOut: false,
    });
  });

  it('--all drains every READY or UNHEALTHY shard and lists each', async () => {
    const r = await runCli(['ctl', 'drain', '--all', '--json', '--socket', fx.socket]);
    expect(r.exitCode).toBe(0);
    const ids = (JSON.parse(r.stdout) as { shards: { shardId: string; state: string }[] }).shards.map((s) => [s.shardId, s.state]);
    expect(ids).toEqual(['busy', 'idle', 'idle2', 'slow'].map((id) => [id, 'SHARD_STATE_DRAINING']));
  });

  it('exits 1 for a shard that is still STARTING, saying why', async () => {
    const starting = fx.cp.waitFor(NODE_ID, shardIs('loading', ShardState.STARTING), 20_000);
    fx.cp.send(NODE_ID, { case: 'start', value: simStart('loading', await freePort(), { args: ['--load-time', '60s'], gpu: 7 }) });
    await starting;
    const r = await runCli(['ctl', 'drain', 'loading', '--socket', fx.socket]);
    expect(r.exitCode).toBe(1);
    expect(r.stderr).toBe('error: shard loading is STARTING: only a READY or UNHEALTHY shard can be drained');
  });

  it('exits 1 for an unknown shard, listing the known ones', async () => {
    const r = await runCli(['ctl', 'drain', 'nope', '--socket', fx.socket]);
    expect(r.exitCode).toBe(1);
    expect(r.stderr).toMatch(/^error: no shard "nope" on node node-a; known shards: busy, idle, idle2, (loading, )?slow$/);
  });

  it('exits 2 for an invalid shard id, or for neither a shard nor --all, before calling anything', async () => {
    const invalid = await runCli(['ctl', 'drain', 'a/b', '--socket', '/nonexistent/agent.sock']);
    expect(invalid.exitCode).toBe(2);
    expect(invalid.stderr).toMatch(/^error: invalid shard id "a\/b"/);
    const neither = await runCli(['ctl', 'drain', '--socket', '/nonexistent/agent.sock']);
    expect(neither.exitCode).toBe(2);
    expect(neither.stderr).toBe('error: name one shard or give --all, not both and not neither');
  });
});
