/**
 * SGLang's prefix cache in the SGLang double, as far as its metrics show it:
 * a new request's prompt is matched against the prompts already computed,
 * and the matched prefix is served from the cache instead of computed
 * (sglang:realtime_tokens_total{mode="prefill_cache"} against
 * mode="prefill_compute": S:python/sglang/srt/managers/scheduler_components/metrics_reporter.py:628-636,
 * from PrefillAdder.log_hit_tokens += prefix_len, managers/schedule_policy.py:900-901).
 * At least the last prompt token is always computed, for the logits of the
 * first output token *(inferred from the radix tree's match limit)*. A
 * token here is a word, as the doubles count prompt tokens
 * (openai-responses.ts countPromptTokens).
 */

/** Prompts kept; the oldest is forgotten first (SGLang evicts by LRU when the KV pool fills). */
const MAX_PROMPTS = 1000;

/** The prompt's tokens (words) of a completions or chat body, in countPromptTokens' order. */
export function promptWords(body: Record<string, unknown>): string[] {
  let text = '';
  if (typeof body.prompt === 'string') text = body.prompt;
  else if (Array.isArray(body.messages)) {
    text = body.messages.map((m) => (m && typeof m === 'object' && typeof m.content === 'string' ? m.content : '')).join(' ');
  }
  return text.split(/\s+/).filter(Boolean);
}

export class FakeRadixCache {
  readonly #prompts: string[][] = [];

  /** Tokens of `words` served from the cache: the longest prefix shared with a cached prompt, never the whole prompt. */
  match(words: readonly string[]): number {
    let best = 0;
    for (const p of this.#prompts) {
      let i = 0;
      while (i < p.length && i < words.length && p[i] === words[i]) i++;
      best = Math.max(best, i);
    }
    return Math.max(0, Math.min(best, words.length - 1));
  }

  /** The prompt's KV entries are in the cache from its prefill on. */
  insert(words: readonly string[]): void {
    if (words.length === 0) return;
    this.#prompts.push([...words]);
    if (this.#prompts.length > MAX_PROMPTS) this.#prompts.shift();
  }

  /** flush_cache: the tree is reset (S:python/sglang/srt/managers/scheduler.py:4251-4260). */
  reset(): void {
    this.#prompts.length = 0;
  }
}
