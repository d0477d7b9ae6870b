import type { StartShard } from '../../../gen/llmgw/v1/agent_pb.js';
import { findFlags } from '../find-flags.js';
import { KNOWN_ANSWER_PRIORITY, type AskOptions } from '../known-answer-options.js';
import { servesHttp } from '../shard-launch.js';
import { dataParallelSize } from './vllm-engine.js';

/**
 * What vLLM offers the known-answer ask beyond a plain completion, read off
 * its profile (review engine-fidelity-3 E2, E15):
 *
 * - Priority only under `--scheduling-policy priority`, which takes the
 *   lowest value first (Request.__lt__, V:vllm/v1/request.py:345-356;
 *   PriorityRequestQueue, V:vllm/v1/core/sched/request_queue.py:131-138);
 *   the field is an int64 (V:vllm/entrypoints/openai/completion/protocol.py:133-143).
 *   Elsewhere its FCFS queue ignores the field. The ask only moves ahead of
 *   the queue: it does not end a running request (vLLM preempts only for KV
 *   blocks, V:vllm/v1/core/sched/scheduler.py:629-660).
 * - Token ids in the logprobs (return_tokens_as_token_ids, "token_id:N",
 *   V:vllm/entrypoints/generate/base/serving.py:290-313).
 * - Every DP rank: its API server routes a request to the rank the
 *   X-data-parallel-rank header names (V:vllm/entrypoints/generate/base/serving.py:205-218;
 *   DPLBAsyncMPClient.get_core_engine_for_request, V:vllm/v1/engine/core_client.py:1472-1519),
 *   any of 0..dp-1 where one API server fronts them all
 *   (V:vllm/v1/engine/input_processor.py:299-307), which is how the agent
 *   runs vLLM DP (--api-server-count 1, no hybrid or external balancing:
 *   vllm-engine.ts).
 */
export function vllmKnownAnswerAsk(spec: StartShard): AskOptions {
  const args = spec.profile?.args ?? [];
  const policy = findFlags(args, { flags: ['--scheduling-policy'], flexible: true }).at(-1)?.value;
  let dp = 1;
  try {
    dp = dataParallelSize(args);
  } catch {
    // Refused at validation; a shard running is never here.
  }
  return {
    tokenIds: true,
    ...(policy === 'priority' ? { priority: -KNOWN_ANSWER_PRIORITY } : {}),
    ...(dp > 1 && servesHttp(spec) ? { dpRanks: dp } : {}),
  };
}
