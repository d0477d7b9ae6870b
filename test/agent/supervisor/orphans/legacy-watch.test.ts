import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { legacyWatch } from '../../../../src/agent/supervisor/orphans/legacy-watch.js';
import { StartShardSchema } from '../../../../src/gen/llmgw/v1/agent_pb.js';

const file = (engine: string, args: string[] = [], servesHttp = true) => ({
  spec: create(StartShardSchema, { shardId: 's', httpPort: 8100, profile: { engine, args } }),
  servesHttp,
  inFlightMetric: engine === 'sglang' ? 'sglang:num_running_reqs' : 'vllm:num_requests_running',
  generationTokensMetric: engine === 'sglang' ? 'sglang:generation_tokens_total' : 'vllm:generation_tokens_total',
});

describe('legacyWatch (a state file of an older agent, which kept two metric names)', () => {
  it("judges an adopted SGLang by what this agent knows of SGLang, not by the recorded counter that moves once per finished request", () => {
    expect(legacyWatch(file('sglang', ['--api-key', 'k', '--admin-api-key=adm']))).toEqual({
      healthPort: 8100,
      healthPath: '/health_generate',
      probeTimeoutMs: 5000,
      readiness: 'model-listed',
      runningGauges: ['sglang:num_running_reqs'],
      inFlightGauges: ['sglang:num_running_reqs', 'sglang:num_queue_reqs', 'sglang:num_grammar_queue_reqs'],
      progressCounters: ['sglang:realtime_tokens_total{mode="decode"}', 'sglang:realtime_tokens_total', 'sglang:num_requests_total'],
      apiKey: 'k',
      adminApiKey: 'adm',
    });
  });
  it('reads a vLLM profile the same way, and a worker rank by staying alive', () => {
    expect(legacyWatch(file('vllm')).progressCounters).toEqual(['vllm:generation_tokens_total', 'vllm:prompt_tokens_total', 'vllm:request_success_total']);
    expect(legacyWatch(file('vllm', [], false))).toMatchObject({ healthPort: 0, readiness: 'health', runningGauges: [] });
  });
  it('falls back to the recorded names for an engine it does not know', () => {
    expect(legacyWatch(file('other'))).toMatchObject({ runningGauges: ['vllm:num_requests_running'], progressCounters: ['vllm:generation_tokens_total'] });
  });
});
