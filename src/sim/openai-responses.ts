/**
 * Bodies shaped like vLLM's OpenAI-compatible server returns them, so that
 * clients, routers and tests written against the sim work against vLLM.
 */

const WORDS = ['the', 'model', 'is', 'simulated', 'and', 'answers', 'with', 'plausible', 'tokens', 'for', 'tests'];

/**
 * The i-th generated token: deterministic, so tests can compare output.
 * `offset` shifts the vocabulary by the weights the double read
 * (weightsTokenOffset): other weights, another answer.
 */
export function simToken(i: number, offset = 0): string {
  return `${i === 0 ? '' : ' '}${WORDS[(i + offset) % WORDS.length]}`;
}

/** The id of the i-th generated token in the double's vocabulary (the garbage token is GARBAGE_TOKEN_ID). */
export function simTokenId(i: number, offset = 0): number {
  return WORD_ID_BASE + ((i + offset) % WORDS.length);
}

/**
 * How the weights a double read shift its answers (issue 51): a different
 * checkpoint of the same layout answers differently, as a real engine
 * would, so the known answer can catch it. From the sha256 of the bytes
 * read; 0 (the plain vocabulary) when no weights were read.
 */
export function weightsTokenOffset(digest: string | undefined): number {
  if (!digest) return 0;
  return Number.parseInt(digest.slice(0, 8), 16) % WORDS.length;
}

const WORD_ID_BASE = 1000;
/** What an engine without its weights generates, as an id (fake-openai-routes.ts GARBAGE_TOKEN). */
export const GARBAGE_TOKEN_ID = 0;

/** One generated token: its text and its id. */
export interface SimToken {
  text: string;
  id: number;
}

/**
 * A completion's `logprobs` (V:vllm/entrypoints/openai/completion/serving.py:647-728):
 * per generated token its text, its logprob, and a dict of the sampled token
 * and the `top` best ones there, keyed by text, or by "token_id:N" when the
 * request asked return_tokens_as_token_ids (`asIds`; vLLM only:
 * V:vllm/entrypoints/generate/base/serving.py:290-313; SGLang keys by text,
 * S:python/sglang/srt/entrypoints/openai/utils.py:33-38). The sampled
 * (greedy) token is the best; the others are the next words of the
 * vocabulary, each less likely (garbage's are garbage).
 */
export function completionLogprobs(tokens: readonly SimToken[], top: number, asIds: boolean) {
  const key = (t: SimToken) => (asIds ? `token_id:${t.id}` : t.text);
  const alternative = (t: SimToken, k: number): SimToken => {
    // Weights lost: the alternatives are garbage too ('"', '#', ...), never a word.
    if (t.id === GARBAGE_TOKEN_ID) return { text: String.fromCharCode(t.text.charCodeAt(0) + k), id: GARBAGE_TOKEN_ID + k };
    const j = (t.id - WORD_ID_BASE + k) % WORDS.length;
    return { text: `${t.text.startsWith(' ') ? ' ' : ''}${WORDS[j]}`, id: WORD_ID_BASE + j };
  };
  let offset = 0;
  const text_offset = tokens.map((t) => {
    const at = offset;
    offset += key(t).length;
    return at;
  });
  return {
    text_offset,
    token_logprobs: tokens.map(() => -0.05),
    tokens: tokens.map(key),
    top_logprobs: tokens.map((t) => Object.fromEntries([[key(t), -0.05], ...Array.from({ length: Math.max(0, top - 1) }, (_, k) => [key(alternative(t, k + 1)), -3 - k] as const)])),
  };
}

export type CompletionKind = 'chat' | 'text';

export function modelList(model: string, createdS: number) {
  return {
    object: 'list',
    data: [{ id: model, object: 'model', created: createdS, owned_by: 'vllm', root: model, parent: null, max_model_len: 4096 }],
  };
}

export function completionBody(kind: CompletionKind, id: string, model: string, text: string, promptTokens: number, completionTokens: number) {
  const createdS = Math.floor(Date.now() / 1000);
  const usage = { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens };
  if (kind === 'chat') {
    return {
      id,
      object: 'chat.completion',
      created: createdS,
      model,
      choices: [{ index: 0, message: { role: 'assistant', content: text }, logprobs: null, finish_reason: 'length' }],
      usage,
    };
  }
  return {
    id,
    object: 'text_completion',
    created: createdS,
    model,
    choices: [{ index: 0, text, logprobs: null, finish_reason: 'length' }],
    usage,
  };
}

/** One SSE chunk; `finishReason` set on the last one. */
export function completionChunk(kind: CompletionKind, id: string, model: string, token: string, first: boolean, finishReason: string | null) {
  const createdS = Math.floor(Date.now() / 1000);
  if (kind === 'chat') {
    const delta = first ? { role: 'assistant', content: token } : { content: token };
    return { id, object: 'chat.completion.chunk', created: createdS, model, choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }] };
  }
  return { id, object: 'text_completion', created: createdS, model, choices: [{ index: 0, text: token, logprobs: null, finish_reason: finishReason }] };
}

/** vLLM's error body. */
export function errorBody(message: string, type: string, code: number) {
  return { object: 'error', message, type, param: null, code };
}

/** A rough prompt token count: vLLM counts real tokens; words are close enough for a simulator. */
export function countPromptTokens(body: Record<string, unknown>): number {
  let text = '';
  if (typeof body.prompt === 'string') text = body.prompt;
  else if (Array.isArray(body.messages)) {
    text = body.messages.map((m) => (m && typeof m === 'object' && typeof m.content === 'string' ? m.content : '')).join(' ');
  }
  return text.split(/\s+/).filter(Boolean).length;
}
