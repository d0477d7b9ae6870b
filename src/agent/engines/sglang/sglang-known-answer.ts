import type { StartShard } from '../../../gen/llmgw/v1/agent_pb.js';
import { findFlags } from '../find-flags.js';
import { KNOWN_ANSWER_PRIORITY, type AskOptions } from '../known-answer-options.js';

/**
 * What SGLang offers the known-answer ask beyond a plain completion, read
 * off its profile (review engine-fidelity-3 E2, E15):
 *
 * - Priority only under `--enable-priority-scheduling`: otherwise the field
 *   aborts the request (--abort-on-priority-when-disabled,
 *   S:python/sglang/srt/server_args.py:854-858). It takes the highest first,
 *   the lowest with `--schedule-low-priority-values-first`
 *   (S:python/sglang/srt/server_args.py:844-866).
 * - No token ids: its OpenAI route has no such field and keys its top
 *   logprobs by text (S:python/sglang/srt/entrypoints/openai/utils.py:33-38).
 * - No DP ranks: it reads the same X-data-parallel-rank header
 *   (S:python/sglang/srt/entrypoints/openai/serving_base.py:264-293), but
 *   the agent runs no SGLang DP shard, so nothing is asked per rank.
 */
export function sglangKnownAnswerAsk(spec: StartShard): AskOptions {
  const args = spec.profile?.args ?? [];
  const has = (flag: string) => findFlags(args, { flags: [flag] }).length > 0;
  if (!has('--enable-priority-scheduling')) return {};
  return { priority: has('--schedule-low-priority-values-first') ? -KNOWN_ANSWER_PRIORITY : KNOWN_ANSWER_PRIORITY };
}
