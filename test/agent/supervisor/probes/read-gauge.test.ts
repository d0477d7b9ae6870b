import { describe, expect, it } from 'vitest';
import { readGauge, readGauges } from '../../../../src/agent/supervisor/probes/read-gauge.js';

const text = `# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="a"} 2.0
vllm:num_requests_running{model_name="b",x="}"} 1
vllm:num_requests_running_total 99
sglang:num_running_reqs 4
`;

describe('readGauge', () => {
  it('sums a gauge over its label sets, and only that gauge', () => {
    expect(readGauge(text, 'vllm:num_requests_running')).toBe(3);
  });
  it('reads an unlabelled gauge', () => {
    expect(readGauge(text, 'sglang:num_running_reqs')).toBe(4);
  });
  it('says nothing about a gauge that is not there', () => {
    expect(readGauge(text, 'vllm:num_requests_waiting')).toBeUndefined();
  });
});

describe('readGauge over the label sets SGLang writes twice', () => {
  const labels = (extra: string) => `model_name="m",engine_type="unified",tp_rank="0",moe_ep_rank="0"${extra}`;
  it('reads the priority="" total alone when --enable-priority-scheduling also writes one series per priority', () => {
    // S:python/sglang/srt/observability/metrics_collector.py:1131-1143: the sum of all three was twice the truth (review §0 #10).
    const t = [
      `sglang:num_running_reqs{${labels(',pp_rank="0",priority=""')}} 5.0`,
      `sglang:num_running_reqs{${labels(',pp_rank="0",priority="0"')}} 3.0`,
      `sglang:num_running_reqs{${labels(',pp_rank="0",priority="1"')}} 2.0`,
    ].join('\n');
    expect(readGauge(t, 'sglang:num_running_reqs')).toBe(5);
  });
  it('counts the pipeline stages of one batch once, and still adds data-parallel ranks', () => {
    const t = [
      `sglang:num_running_reqs{${labels(',pp_rank="0",dp_rank="0"')}} 4.0`,
      `sglang:num_running_reqs{${labels(',pp_rank="1",dp_rank="0"')}} 4.0`,
      `sglang:num_running_reqs{${labels(',pp_rank="0",dp_rank="1"')}} 2.0`,
      `sglang:num_running_reqs{${labels(',pp_rank="1",dp_rank="1"')}} 2.0`,
    ].join('\n');
    expect(readGauge(t, 'sglang:num_running_reqs')).toBe(6);
  });
});

describe('readGauges', () => {
  it('adds running and waiting, and says nothing when the engine exports neither', () => {
    const t = 'vllm:num_requests_running{engine="0"} 2\nvllm:num_requests_waiting{engine="0"} 7\n';
    expect(readGauges(t, ['vllm:num_requests_running', 'vllm:num_requests_waiting'])).toBe(9);
    expect(readGauges(t, ['sglang:num_running_reqs', 'sglang:num_queue_reqs'])).toBeUndefined();
  });
});
