import type { StartShard } from '../../../gen/llmgw/v1/agent_pb.js';
import { engineKindOf } from '../../engines/engine-catalog.js';
import type { AskOptions } from '../../engines/known-answer-options.js';

export { KNOWN_ANSWER_PRIORITY } from '../../engines/known-answer-options.js';

/**
 * What a shard's engine offers the known-answer ask beyond a plain
 * completion (priority, token ids, every DP rank), as its wing reads it off
 * the profile (EngineKind.knownAnswerAsk: vllm/vllm-known-answer.ts,
 * sglang/sglang-known-answer.ts); a plain completion for a kind that offers
 * nothing more, or a name no wing has.
 */
export function knownAnswerAsk(spec: StartShard): AskOptions {
  return engineKindOf(spec.profile?.engine ?? '')?.knownAnswerAsk?.(spec) ?? {};
}
