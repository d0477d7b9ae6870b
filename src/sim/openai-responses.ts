/**
 * Bodies shaped like vLLM's OpenAI-compatible server returns them, so that
 * clients, routers and tests written against the sim work against vLLM.
 */

const WORDS = ['the', 'model', 'is', 'simulated', 'and', 'answers', 'with', 'plausible', 'tokens', 'for', 'tests'];

/** The i-th generated token: deterministic, so tests can compare output. */
export function simToken(i: number): string {
  return `${i === 0 ? '' : ' '}${WORDS[i % WORDS.length]}`;
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
