import { describe, expect, it } from 'vitest';
import { readGauge } from '../../../src/agent/supervisor/read-gauge.js';

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
