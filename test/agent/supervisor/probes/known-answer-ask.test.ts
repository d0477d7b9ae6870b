import { describe, expect, it } from 'vitest';
import { KNOWN_ANSWER_PRIORITY, knownAnswerAsk } from '../../../../src/agent/supervisor/probes/known-answer-ask.js';
import { doubleStart } from '../../../helpers/double-shards.js';

const vllm = (args: string[], more: { rank?: number; nnodes?: number } = {}) => knownAnswerAsk(doubleStart('vllm', 's', 8000, { args, ...more }));
const sglang = (args: string[]) => knownAnswerAsk(doubleStart('sglang', 's', 8000, { args }));

describe('what the known-answer ask uses of each engine', () => {
  it('vLLM: token ids always; a priority (lowest first) only under --scheduling-policy priority, however it is spelled', () => {
    expect(vllm([])).toEqual({ tokenIds: true });
    expect(vllm(['--scheduling-policy', 'fcfs'])).toEqual({ tokenIds: true });
    expect(vllm(['--scheduling-policy', 'priority'])).toEqual({ tokenIds: true, priority: -KNOWN_ANSWER_PRIORITY });
    expect(vllm(['--scheduling_policy=priority'])).toEqual({ tokenIds: true, priority: -KNOWN_ANSWER_PRIORITY });
  });

  it('vLLM DP: every rank asked on the rank that serves the API', () => {
    expect(vllm(['--data-parallel-size', '4'])).toEqual({ tokenIds: true, dpRanks: 4 });
    expect(vllm(['-dp', '2'], { nnodes: 2, rank: 0 })).toEqual({ tokenIds: true, dpRanks: 2 });
  });

  it('SGLang: a priority only under --enable-priority-scheduling, highest first unless low values go first', () => {
    expect(sglang([])).toEqual({});
    expect(sglang(['--enable-priority-scheduling'])).toEqual({ priority: KNOWN_ANSWER_PRIORITY });
    expect(sglang(['--enable-priority-scheduling', '--schedule-low-priority-values-first'])).toEqual({ priority: -KNOWN_ANSWER_PRIORITY });
  });
});
