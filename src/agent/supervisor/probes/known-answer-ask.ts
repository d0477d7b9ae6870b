import type { StartShard } from '../../../gen/llmgw/v1/agent_pb.js';
import { findFlags } from '../../engines/find-flags.js';
import { servesHttp } from '../../engines/shard-launch.js';
import { dataParallelSize } from '../../engines/vllm/vllm-engine.js';
import type { AskOptions } from './known-answer.js';

/*
 * What a shard's engine offers the known-answer ask beyond a plain
 * completion, read off its profile (review engine-fidelity-3 E2, E15):
 *
 * - Priority, only where the engine schedules by it; elsewhere the field is
 *   ignored at best (vLLM's FCFS queue) or aborts the request (SGLang's
 *   --abort-on-priority-when-disabled, S:python/sglang/srt/server_args.py:854-858).
 *   vLLM under `--scheduling-policy priority` takes the lowest value first
 *   (Request.__lt__, V:vllm/v1/request.py:345-356; PriorityRequestQueue,
 *   V:vllm/v1/core/sched/request_queue.py:131-138); the field is an int64
 *   (V:vllm/entrypoints/openai/completion/protocol.py:133-143). SGLang under
 *   `--enable-priority-scheduling` takes the highest first, the lowest with
 *   `--schedule-low-priority-values-first` (S:python/sglang/srt/server_args.py:844-866).
 *   Either way the ask only moves ahead of the queue: it does not end a
 *   running request (vLLM preempts only for KV blocks, V:vllm/v1/core/sched/scheduler.py:629-660).
 * - Token ids in the logprobs (vLLM's return_tokens_as_token_ids, "token_id:N",
 *   V:vllm/entrypoints/generate/base/serving.py:290-313). SGLang's OpenAI
 *   route has no such field and keys its top logprobs by text
 *   (S:python/sglang/srt/entrypoints/openai/utils.py:33-38).
 * - Every DP rank, on vLLM: its API server routes a request to the rank the
 *   X-data-parallel-rank header names (V:vllm/entrypoints/generate/base/serving.py:205-218;
 *   DPLBAsyncMPClient.get_core_engine_for_request, V:vllm/v1/engine/core_client.py:1472-1519),
 *   any of 0..dp-1 where one API server fronts them all
 *   (V:vllm/v1/engine/input_processor.py:299-307), which is how the agent
 *   runs vLLM DP (--api-server-count 1, no hybrid or external balancing:
 *   vllm-engine.ts). SGLang reads the same header
 *   (S:python/sglang/srt/entrypoints/openai/serving_base.py:264-293), but the
 *   agent runs no SGLang DP shard, so nothing is asked per rank there.
 */

/** The magnitude of the ask's priority: ahead of any request a client marks, short of any limit. */
export const KNOWN_ANSWER_PRIORITY = 1_000_000;

export function knownAnswerAsk(spec: StartShard): AskOptions {
  const engine = spec.profile?.engine ?? '';
  const args = spec.profile?.args ?? [];
  if (engine === 'vllm') {
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
  if (engine === 'sglang') {
    const has = (flag: string) => findFlags(args, { flags: [flag] }).length > 0;
    if (!has('--enable-priority-scheduling')) return {};
    return { priority: has('--schedule-low-priority-values-first') ? -KNOWN_ANSWER_PRIORITY : KNOWN_ANSWER_PRIORITY };
  }
  return {};
}
