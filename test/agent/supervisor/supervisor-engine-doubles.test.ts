import { afterEach, describe, expect, it } from 'vitest';
import type { SupervisorConfig } from '../../../src/agent/config/agent-config.js';
import { SglangEngine } from '../../../src/agent/engines/sglang/sglang-engine.js';
import { VllmEngine } from '../../../src/agent/engines/vllm/vllm-engine.js';
import type { ShardTransition } from '../../../src/agent/supervisor/shard/shard-snapshot.js';
import { ShardState } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { doubleStart } from '../../helpers/double-shards.js';
import { freePort, until } from '../../helpers/engine-processes.js';
import { FAKE_SGLANG, FAKE_VLLM } from '../../helpers/fake-engines.js';
import { useSupervisors } from '../../helpers/use-supervisors.js';
import { parseShardId, parseStartShard } from '../../../src/lib/shard-id.js';

/*
 * The supervisor reading the engine doubles' series the way each engine's
 * watch names them (VllmEngine.watch, SglangEngine.watch): what a drain
 * counts, and what stall detection calls progress.
 */

const harness = useSupervisors();
const loads: AbortController[] = [];
afterEach(() => {
  for (const a of loads.splice(0)) a.abort();
});

const engines = {
  vllm: new VllmEngine({ command: [FAKE_VLLM, 'serve'] }, 'lo'),
  sglang: new SglangEngine({ command: [FAKE_SGLANG, 'serve'] }, 'lo'),
};

async function readyDouble(engine: 'vllm' | 'sglang', id: string, args: string[], over: Partial<SupervisorConfig> = {}) {
  const sup = harness.newSupervisor(over);
  const seen: ShardTransition[] = [];
  sup.on('transition', (t) => seen.push(t));
  const port = await freePort();
  const spec = doubleStart(engine, id, port, { args });
  const plan = engines[engine].command(spec);
  await sup.start(parseStartShard(spec), { plan, servesHttp: true, watch: engines[engine].watch(spec, plan) });
  await sup.settle(parseShardId(id), { timeoutMs: 30_000 });
  return { sup, port, seen };
}

/** `n` streams that run until the test ends. */
function streams(port: number, n: number, maxTokens: number): void {
  const ac = new AbortController();
  loads.push(ac);
  const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: maxTokens, stream: true });
  for (let i = 0; i < n; i++) {
    void fetch(`http://127.0.0.1:${port}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body, signal: ac.signal })
      .then((r) => r.text())
      .catch(() => undefined);
  }
}

const unhealthy = (seen: ShardTransition[]) => seen.filter((t) => t.to === ShardState.UNHEALTHY).map((t) => t.shard.error);

describe('in flight for a drain (review §0 #5)', () => {
  it.each(['vllm', 'sglang'] as const)('counts the requests %s holds waiting, not only those it runs', async (engine) => {
    const { sup, port } = await readyDouble(engine, `drain-${engine}`, ['--sim-max-running', '1', '--sim-token-latency', '50ms']);
    streams(port, 3, 10_000);
    // One in the batch, two queued: a drain that saw 1 ended while two still waited.
    await until(async () => (await sup.inFlight(parseShardId(`drain-${engine}`))) === 3, 'three requests in flight', 10_000);
    expect(await sup.inFlight(parseShardId(`drain-${engine}`))).toBe(3);
  });
});

describe('progress, per engine and per model kind (review §0 #1, #9)', () => {
  it('never calls a vLLM embedding model under steady load stalled: its requests finish, it generates no token', async () => {
    const { port, seen } = await readyDouble('vllm', 'embed', ['--runner', 'pooling', '--sim-embed-latency', '300ms'], {
      stallTimeoutMs: 1500,
      healthIntervalMs: 200,
    });
    const ac = new AbortController();
    loads.push(ac);
    // Two clients back to back: always a request running, never a generation token.
    const client = async () => {
      while (!ac.signal.aborted) {
        await fetch(`http://127.0.0.1:${port}/v1/embeddings`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'm', input: 'a sentence to embed' }),
          signal: ac.signal,
        })
          .then((r) => r.text())
          .catch(() => undefined);
      }
    };
    void client();
    void client();
    await new Promise((r) => setTimeout(r, 5000));
    const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    expect(metrics).toMatch(/vllm:generation_tokens_total\{[^}]*\} 0/);
    expect(unhealthy(seen)).toEqual([]);
  });
  // SGLang's long generation and its hung twin are test/e2e/sglang-long-generation.test.ts, through the real agent.
});
