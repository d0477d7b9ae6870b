/**
 * What both engine doubles share of LoRA adapters: reading an adapter's
 * folder as the engines' loaders do, and answering by it. An adapter's
 * answer depends on the base's answer AND on the adapter's own bytes (the
 * sha256 of its adapter_model.safetensors), so a wrong adapter, or none, is
 * visible in the text. Each engine's behaviour is fake-vllm-lora.ts and
 * fake-sglang-lora.ts.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { SimToken } from './openai-responses.js';

/** An adapter folder as read: adapter_config.json's rank and base, and the weights' digest. */
export interface AdapterFiles {
  dir: string;
  /** adapter_config.json `r` (PEFTHelper, V:vllm/lora/peft_helper.py:118-132; S:python/sglang/srt/lora/lora_config.py:42-45). */
  rank: number;
  /** adapter_config.json `base_model_name_or_path`; '' when absent. */
  baseModel: string;
  /** sha256 (hex) of adapter_model.safetensors: what the adapter's answers derive from. */
  digest: string;
  /**
   * What its answers are made from (adapterToken): the digest, or '' for
   * weights that are all zero bytes, an adapter whose update is zero (PEFT
   * initialises lora_B to zeros, so an untrained adapter adds nothing:
   * peft/tuners/lora/layer.py reset_lora_parameters, nn.init.zeros_(lora_B)),
   * which answers exactly as its base does. A healthy adapter that happens
   * to agree with its base on a prompt, for the agent's proof.
   */
  answerDigest: string;
}

/** The folder is not an adapter: its config or weights are missing or unreadable. */
export class AdapterFilesError extends Error {
  /** No adapter_config.json at all (vLLM answers that 404: V:vllm/lora/worker_manager.py:161-169). */
  readonly notFound: boolean;
  constructor(message: string, notFound: boolean) {
    super(message);
    this.notFound = notFound;
  }
}

/** Reads adapter `dir` (a local folder: the doubles never download). */
export async function readAdapterFiles(dir: string): Promise<AdapterFiles> {
  const got = async (name: string): Promise<Buffer | NodeJS.ErrnoException> => readFile(join(dir, name)).catch((err: NodeJS.ErrnoException) => err);
  const config = await got('adapter_config.json');
  const weights = config instanceof Buffer ? await got('adapter_model.safetensors') : config;
  return adapterFilesOf(dir, () => config, () => weights);
}

/** readAdapterFiles at a start, before the server answers (vLLM's --lora-modules). */
export function readAdapterFilesSync(dir: string): AdapterFiles {
  const got = (name: string): Buffer | NodeJS.ErrnoException => {
    try {
      return readFileSync(join(dir, name));
    } catch (err) {
      return err as NodeJS.ErrnoException;
    }
  };
  return adapterFilesOf(dir, () => got('adapter_config.json'), () => got('adapter_model.safetensors'));
}

function adapterFilesOf(dir: string, configBytes: () => Buffer | NodeJS.ErrnoException, weightBytes: () => Buffer | NodeJS.ErrnoException): AdapterFiles {
  const fail = (file: string, err: NodeJS.ErrnoException, notFound: boolean) => new AdapterFilesError(`${join(dir, file)}: ${err.code ?? err.message}`, notFound);
  const c = configBytes();
  if (!(c instanceof Buffer)) {
    const e = c as NodeJS.ErrnoException;
    throw fail('adapter_config.json', e, e.code === 'ENOENT' || e.code === 'ENOTDIR');
  }
  let config: Record<string, unknown>;
  try {
    config = JSON.parse(c.toString('utf8')) as Record<string, unknown>;
  } catch (err) {
    throw fail('adapter_config.json', err as Error, false);
  }
  const rank = config?.r;
  if (typeof rank !== 'number' || !Number.isInteger(rank) || rank < 1) throw new AdapterFilesError(`${join(dir, 'adapter_config.json')}: no integer r`, false);
  const weights = weightBytes();
  if (!(weights instanceof Buffer)) {
    const e = weights as NodeJS.ErrnoException;
    throw fail('adapter_model.safetensors', e, e.code === 'ENOENT');
  }
  const digest = createHash('sha256').update(weights).digest('hex');
  return {
    dir,
    rank,
    baseModel: typeof config.base_model_name_or_path === 'string' ? config.base_model_name_or_path : '',
    digest,
    answerDigest: weights.length > 0 && weights.every((b) => b === 0) ? '' : digest,
  };
}

/**
 * Token `i` of an adapter's answer, from the base's token at `i`: the base's
 * word (so the base weights still decide it) marked with two hex digits of
 * the adapter's digest (so its bytes do too).
 */
export function adapterToken(i: number, base: SimToken, digest: string): SimToken {
  // An adapter whose update is zero (AdapterFiles.answerDigest ''): the base's own token.
  if (digest === '') return base;
  const at = (2 * i) % (digest.length - 1);
  const hex = digest.slice(at, at + 2);
  return { text: `${base.text}~${hex}`, id: base.id + 100 * (1 + Number.parseInt(hex, 16)) };
}

/** An adapter a request is answered by: its name, where its answer comes from, and what ends its use. */
export interface LoraAnswer {
  kind: 'adapter';
  /** The `model` the answer reports. */
  model: string;
  /** The adapter's name (its series in the engine's metrics). */
  name: string;
  /** What the scheduler batches by: the engine's id of this copy of the adapter. */
  slot: string;
  /** The digest the answer is made from (another adapter's, under a fault; '' answers as the base: AdapterFiles.answerDigest). */
  digest: string;
  /** The request left the engine (finished, aborted, or its client went away); called once. */
  release(): void;
}

/**
 * What a request's body names, as the engine resolves it: the base model
 * (go on to the model check, or, with `model`, answered under that name
 * unchecked), an adapter, or a refusal with the engine's status and words.
 */
export type LoraPick = { kind: 'base'; model?: string } | LoraAnswer | { kind: 'refuse'; status: number; message: string; type: string };

/** The LoRA side of an engine double, as the OpenAI routes ask it (RouteContext.lora). */
export interface LoraRoutes {
  pick(body: Record<string, unknown>): Promise<LoraPick>;
}

/** One call's `release` made idempotent. */
export function once(fn: () => void): () => void {
  let done = false;
  return () => {
    if (done) return;
    done = true;
    fn();
  };
}
