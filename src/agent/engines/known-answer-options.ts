/** What a shard's engine offers the known-answer ask beyond a plain completion (EngineKind.knownAnswerAsk, read off its profile). */
export interface AskOptions {
  /** The request's priority, sent only where the engine schedules by it (the wing's knownAnswerAsk). */
  priority?: number;
  /** Ask vLLM for its tokens as "token_id:N" (V:vllm/entrypoints/openai/completion/protocol.py:160-166). */
  tokenIds?: boolean;
  /** Above 1: every DP rank is asked, each by DP_RANK_HEADER. */
  dpRanks?: number;
}

/** The magnitude of the ask's priority: ahead of any request a client marks, short of any limit. */
export const KNOWN_ANSWER_PRIORITY = 1_000_000;
