import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ShardState } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { type CtlFixture, NODE_ID, startCtlFixture } from '../../helpers/ctl-fixture.js';
import { until } from '../../helpers/engine-processes.js';
import { runCli } from '../../helpers/run-cli.js';
import { shardIs } from '../../helpers/sim-shards.js';

/* `ctl drain --all --deadline`: the maintenance drain of issue 28, one flag that waits with its bound. */

let fx: CtlFixture;
const ports: Record<string, number> = {};

beforeAll(async () => {
  fx = await startCtlFixture();
  ports.idle = (await fx.startShard('idle', ['--load-time', '200ms', '--token-latency', '10ms'])).port;
  ports.slow = (await fx.startShard('slow', ['--load-time', '200ms', '--token-latency', '1s'])).port;
}, 90_000);
afterAll(() => fx?.close());

const running = async (id: string) =>
  Number(/^vllm:num_requests_running(?:\{[^}]*\})? (\S+)$/m.exec(await (await fetch(`http://127.0.0.1:${ports[id]}/metrics`)).text())?.[1] ?? Number.NaN);

describe('llmgw ctl drain --all --deadline', () => {
  it('drains every serving shard, exits 1 at the deadline naming what is left, and 0 once nothing is in flight', async () => {
    const abort = new AbortController();
    const held = fetch(`http://127.0.0.1:${ports.slow}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', prompt: 'hello', max_tokens: 1000 }),
      signal: abort.signal,
    }).catch(() => undefined);
    try {
      await until(async () => (await running('slow')) === 1, 'a request in flight on slow');
      const both = Promise.all(['idle', 'slow'].map((id) => fx.cp.waitFor(NODE_ID, shardIs(id, ShardState.DRAINING), 10_000)));
      const late = await runCli(['ctl', 'drain', '--all', '--deadline', '2s', '--socket', fx.socket]);
      expect(late.exitCode).toBe(1);
      expect(late.stderr).toMatch(/timed out after 2s: slow has 1 requests in flight; the shards stay DRAINING/);
      await both;
    } finally {
      abort.abort();
      await held;
    }
    await until(async () => (await running('slow')) === 0, 'the request to end');
    const done = await runCli(['ctl', 'drain', '--all', '--deadline', '30s', '--socket', fx.socket]);
    expect(done.exitCode, done.stderr).toBe(0);
    expect(done.stdout).toBe('drained\nidle: DRAINING, 0 in flight\nslow: DRAINING, 0 in flight');
  });

  it('refuses --deadline with --timeout or --cancel (exit 2)', async () => {
    for (const extra of [['--timeout', '1m'], ['--cancel']]) {
      const r = await runCli(['ctl', 'drain', '--all', '--deadline', '1m', ...extra, '--socket', '/nonexistent/agent.sock']);
      expect(r.exitCode, extra.join(' ')).toBe(2);
    }
  });
});
