import { readCounter, readGauge, readGauges } from '../../../../src/agent/supervisor/probes/read-gauge.js';
import { describe, expect, it } from 'vitest';

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
  it('reads only lines that start with the name: not the name inside a label value or a comment, nor a longer name', () => {
    const t = [
      'other_metric{note="vllm:num_requests_running 50"} 7',
      '#vllm:num_requests_running 60',
      'xvllm:num_requests_running 70',
      'vllm:num_requests_running2 80',
      'vllm:num_requests_running{model_name="a"} 2',
    ].join('\n');
    expect(readGauge(t, 'vllm:num_requests_running')).toBe(2);
    expect(readGauge(t, 'other_metric')).toBe(7);
  });
  it('reads the first line, a last line without a newline, and CRLF line ends', () => {
    expect(readGauge('g 1\r\nh 2\r\ng{a="x"} 3', 'g')).toBe(4);
    expect(readGauge('h 2\r\ng 5', 'g')).toBe(5);
  });
  it('takes the one label set of a gauge as it is, whatever its labels say', () => {
    expect(readGauge('g{priority="1",pp_rank="2"} 6\n', 'g')).toBe(6);
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

  it('with label matchers sums only the label sets that carry them: SGLang decode tokens out of every mode', () => {
    const text = `sglang:realtime_tokens_total{model_name="m",tp_rank="0",mode="prefill_compute"} 300.0
sglang:realtime_tokens_total{model_name="m",tp_rank="0",mode="prefill_cache"} 5000.0
sglang:realtime_tokens_total{model_name="m",tp_rank="0",mode="decode"} 40.0
sglang:realtime_tokens_total{model_name="m",tp_rank="1",mode="decode"} 2.0
`;
    expect(readCounter(text, 'sglang:realtime_tokens_total')).toBe(5342);
    expect(readCounter(text, 'sglang:realtime_tokens_total{mode="decode"}')).toBe(42);
    expect(readCounter(text, 'sglang:realtime_tokens{mode="decode"}')).toBe(42);
    expect(readCounter(text, 'sglang:realtime_tokens_total{mode="decode",tp_rank="1"}')).toBe(2);
    // SGLang writes a mode's series from its first increment: none decoded yet is unknown, not 0.
    expect(readCounter(text.split('\n').slice(0, 2).join('\n'), 'sglang:realtime_tokens_total{mode="decode"}')).toBeUndefined();
  });
});
