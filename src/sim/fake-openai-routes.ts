/**
 * The OpenAI-compatible routes both engine doubles serve (completions, chat,
 * embeddings), run through a FakeBatchScheduler, with the bodies of
 * openai-responses.ts.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FinishReason, SchedRequest } from './fake-batch-scheduler.js';
import { type LoraAnswer, type LoraRoutes, adapterToken } from './fake-lora.js';
import { readBody, sendJson } from './sim-http.js';
import { type CompletionKind, completionBody, completionChunk, completionLogprobs, countPromptTokens, errorBody, GARBAGE_TOKEN_ID, type SimToken, simToken, simTokenId } from './openai-responses.js';

/** Length of the vectors an embedding request gets. */
const EMBEDDING_DIM = 8;

export interface RouteContext {
  /** Names a request may give as `model` (the first is reported back). */
  servedNames: readonly string[];
  /** Queues a request in the engine's batch; returns a function that drops it. */
  submit(req: SchedRequest): () => void;
  /** Tokens generated when a request gives no max_tokens. */
  defaultMaxTokens: number;
  /**
   * The engine runs on weights it no longer holds (a vLLM level-2 wake
   * without reload_weights, an SGLang resume without a CPU backup or a
   * reload): it still answers, every token garbage. vLLM PR #54235 measured
   * "sleep?level=2 → wake_up → chat completion returns '!!!!!!!!!!!!' … zero
   * warnings"; vLLM #29341 "sleep level 2 causes gibberish outputs".
   */
  weightsLost?: () => boolean;
  /** The vocabulary's shift by the weights read (openai-responses.ts weightsTokenOffset); 0 when absent. */
  tokenOffset?: () => number;
  /** The engine takes return_tokens_as_token_ids (vLLM; SGLang's CompletionRequest has no such field). */
  tokenIdsField?: boolean;
  /**
   * The request is refused before it queues, with its status and message
   * (SGLang's full waiting queue, vLLM's DP rank out of range); undefined: it queues.
   */
  refuse?: (req: IncomingMessage, body: Record<string, unknown>) => { status: number; message: string; type: string } | undefined;
  /** LoRA adapters (fake-lora.ts): which adapter, if any, a request's body names; none: the engine serves none. */
  lora?: LoraRoutes;
}

/** What an engine without its weights generates (see RouteContext.weightsLost). */
export const GARBAGE_TOKEN = '!';


/** The body as a JSON object, or undefined after answering 400. */
async function jsonObject(req: IncomingMessage, res: ServerResponse): Promise<Record<string, unknown> | undefined> {
  try {
    const body = JSON.parse(await readBody(req)) as unknown;
    if (!body || typeof body !== 'object' || Array.isArray(body)) throw new Error('not an object');
    return body as Record<string, unknown>;
  } catch (err) {
    sendJson(res, 400, errorBody(`invalid JSON body: ${(err as Error).message}`, 'BadRequestError', 400));
    return undefined;
  }
}

/** False after answering 404 for a model the engine does not serve. */
function knownModel(body: Record<string, unknown>, ctx: RouteContext, res: ServerResponse): boolean {
  if (body.model === undefined || ctx.servedNames.includes(String(body.model))) return true;
  sendJson(res, 404, errorBody(`The model \`${String(body.model)}\` does not exist.`, 'NotFoundError', 404));
  return false;
}

/**
 * What an aborted request's client sees: a stream gets an error event and is
 * cut (no `data: [DONE]`), a plain request a 500, and either way the
 * connection closes, as when the engine's process goes away under it.
 */
function abortResponse(res: ServerResponse, streaming: boolean, why: string): void {
  if (res.writableEnded || res.destroyed) return;
  if (streaming && res.headersSent) {
    res.write(`data: ${JSON.stringify({ error: errorBody(why, 'InternalServerError', 500) })}\n\n`);
  } else if (!res.headersSent) {
    res.writeHead(500, { 'content-type': 'application/json', connection: 'close' });
    res.write(JSON.stringify(errorBody(why, 'InternalServerError', 500)));
  }
  res.socket?.destroySoon();
  setImmediate(() => res.destroy());
}

/** POST /v1/completions and /v1/chat/completions; resolves when the answer is over. */
export async function serveGeneration(req: IncomingMessage, res: ServerResponse, kind: CompletionKind, ctx: RouteContext): Promise<void> {
  const body = await jsonObject(req, res);
  if (!body) return;
  const pick = (await ctx.lora?.pick(body)) ?? { kind: 'base' };
  if (pick.kind === 'refuse') {
    sendJson(res, pick.status, errorBody(pick.message, pick.type, pick.status));
    return;
  }
  const adapter: LoraAnswer | undefined = pick.kind === 'adapter' ? pick : undefined;
  res.on('close', () => adapter?.release());
  const asBase = pick.kind === 'base' ? pick.model : undefined;
  if (!adapter && asBase === undefined && !knownModel(body, ctx, res)) return;
  const refused = ctx.refuse?.(req, body);
  if (refused) {
    sendJson(res, refused.status, errorBody(refused.message, refused.type, refused.status));
    return;
  }
  const requested = body.max_tokens ?? body.max_completion_tokens ?? body.max_new_tokens;
  const given = typeof requested === 'number' && requested >= 0;
  const n = given ? Math.floor(requested) : ctx.defaultMaxTokens;
  // A request cut off by its max_tokens ends with "length"; one left to
  // the model ends with "stop", as a model that emits its end token does.
  const reason: FinishReason = given ? 'length' : 'stop';
  const model = adapter?.model ?? asBase ?? (ctx.servedNames[0] as string);
  const id = `${kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${randomUUID().replaceAll('-', '')}`;
  const promptTokens = countPromptTokens(body);
  const streaming = body.stream === true;
  if (streaming) res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  let text = '';
  const made: SimToken[] = [];
  await new Promise<void>((done) => {
    const drop = ctx.submit({
      promptTokens,
      maxTokens: n,
      finishReason: reason,
      pooling: false,
      priority: typeof body.priority === 'number' ? body.priority : undefined,
      streaming,
      ...(adapter ? { lora: { name: adapter.name, slot: adapter.slot } } : {}),
      onToken: (i) => {
        const lost = ctx.weightsLost?.() === true;
        const off = ctx.tokenOffset?.() ?? 0;
        let tok: SimToken = lost ? { text: GARBAGE_TOKEN, id: GARBAGE_TOKEN_ID } : { text: simToken(i, off), id: simTokenId(i, off) };
        if (adapter && !lost) tok = adapterToken(i, tok, adapter.digest);
        const token = tok.text;
        if (!streaming) {
          text += token;
          made.push(tok);
          return;
        }
        res.write(`data: ${JSON.stringify(completionChunk(kind, id, model, token, i === 0, i === n - 1 ? reason : null))}\n\n`);
      },
      onFinish: () => {
        if (streaming) res.end('data: [DONE]\n\n');
        else {
          const out = completionBody(kind, id, model, text, promptTokens, n);
          out.choices[0]!.finish_reason = reason;
          // A plain completion's top logprobs when asked (the chat route's shape is not modelled: its logprobs stay null).
          if (kind === 'text' && typeof body.logprobs === 'number' && body.logprobs > 0) {
            (out.choices[0] as { logprobs: unknown }).logprobs = completionLogprobs(made, body.logprobs, ctx.tokenIdsField === true && body.return_tokens_as_token_ids === true);
          }
          sendJson(res, 200, out);
        }
        done();
      },
      onAbort: (why) => {
        abortResponse(res, streaming, why);
        done();
      },
    });
    // The request stream ends once its body is read; a client that went
    // away shows on the response, and its request leaves the batch.
    res.on('close', () => {
      if (!res.writableFinished) {
        drop();
        done();
      }
    });
  });
}

/** POST /v1/embeddings: one prefill step, no generated token. */
export async function serveEmbedding(req: IncomingMessage, res: ServerResponse, ctx: RouteContext): Promise<void> {
  const body = await jsonObject(req, res);
  if (!body || !knownModel(body, ctx, res)) return;
  const inputs = Array.isArray(body.input) ? body.input.map(String) : [String(body.input ?? '')];
  const promptTokens = inputs.reduce((n, s) => n + countPromptTokens({ prompt: s }), 0);
  await new Promise<void>((done) => {
    const drop = ctx.submit({
      promptTokens,
      maxTokens: 0,
      finishReason: 'stop',
      pooling: true,
      onFinish: () => {
        sendJson(res, 200, {
          id: `embd-${randomUUID().replaceAll('-', '')}`,
          object: 'list',
          created: Math.floor(Date.now() / 1000),
          model: ctx.servedNames[0],
          data: inputs.map((s, index) => ({ index, object: 'embedding', embedding: embeddingOf(s) })),
          usage: { prompt_tokens: promptTokens, total_tokens: promptTokens, completion_tokens: 0 },
        });
        done();
      },
      onAbort: (why) => {
        abortResponse(res, false, why);
        done();
      },
    });
    res.on('close', () => {
      if (!res.writableFinished) {
        drop();
        done();
      }
    });
  });
}

/** A deterministic unit-ish vector from the text, so tests can compare answers. */
function embeddingOf(text: string): number[] {
  const v = Array.from({ length: EMBEDDING_DIM }, (_, i) => ((text.length + 1) * (i + 1)) % 7);
  const norm = Math.hypot(...v) || 1;
  return v.map((x) => Number((x / norm).toFixed(6)));
}

/** `Authorization: Bearer <key>` matches one of `keys`. */
export function bearerOk(req: IncomingMessage, keys: readonly string[]): boolean {
  const h = req.headers.authorization ?? '';
  return keys.some((k) => h === `Bearer ${k}`);
}
