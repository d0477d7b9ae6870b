import { describe, expect, it } from 'vitest';
import { readCounter } from '../../../../src/agent/supervisor/probes/read-counter.js';

// As prometheus_client writes them: vLLM's counter per engine, SGLang's split by is_streaming.
const VLLM = `# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="llama"} 1234.0
vllm:generation_tokens_total{engine="1",model_name="llama"} 766.0
# HELP vllm:generation_tokens_created Number of generation tokens processed.
# TYPE vllm:generation_tokens_created gauge
vllm:generation_tokens_created{engine="0",model_name="llama"} 1.7e+09
vllm:num_requests_running{engine="0",model_name="llama"} 3.0
`;
const SGLANG = `# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{engine_type="unified",is_streaming="true",model_name="m",pp_rank="0",tp_rank="0"} 10.0
sglang:generation_tokens_total{engine_type="unified",is_streaming="false",model_name="m",pp_rank="0",tp_rank="0"} 32.0
`;

describe('readCounter', () => {
  it('sums a counter over its label sets, by its exposed name or its own', () => {
    expect(readCounter(VLLM, 'vllm:generation_tokens_total')).toBe(2000);
    expect(readCounter(VLLM, 'vllm:generation_tokens')).toBe(2000);
    expect(readCounter(SGLANG, 'sglang:generation_tokens_total')).toBe(42);
  });

  it('never takes the _created timestamp for the count, nor another series for an absent one', () => {
    expect(readCounter(VLLM, 'vllm:generation_tokens')).not.toBeGreaterThan(1e6);
    expect(readCounter(VLLM, 'sglang:generation_tokens_total')).toBeUndefined();
    expect(readCounter('', 'vllm:generation_tokens_total')).toBeUndefined();
  });
});
