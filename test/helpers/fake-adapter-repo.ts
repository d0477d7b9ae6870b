import { type FakeFile, type FakeRepo, bytes, fakeRepo } from '../models/fake-hub.js';

/** A PEFT adapter_config.json as save_pretrained writes it (the fields the LoRA loaders read, and the base). */
export function adapterConfigText(base: string | undefined, r: number | undefined, extra: Record<string, unknown> = {}): Buffer {
  const cfg: Record<string, unknown> = {
    ...(base === undefined ? {} : { base_model_name_or_path: base }),
    peft_type: 'LORA',
    task_type: 'CAUSAL_LM',
    ...(r === undefined ? {} : { r }),
    lora_alpha: 16,
    target_modules: ['q_proj', 'v_proj'],
    lora_dropout: 0.05,
    bias: 'none',
    ...extra,
  };
  return Buffer.from(`${JSON.stringify(cfg, null, 2)}\n`);
}

export interface FakeAdapterOptions {
  base?: string;
  rank?: number;
  /** Weight bytes; a deterministic 50 kB by default, from `seed`. */
  weights?: Buffer;
  seed?: number;
  /** The weights' file name; adapter_model.safetensors by default, none when null. */
  weightsName?: string | null;
  /** adapter_config.json's content, when a test wants it wrong. */
  config?: Buffer;
  /** More files (README.md, …). */
  more?: FakeFile[];
}

/** A hub repo holding a LoRA adapter: adapter_config.json (git file) and its weights (LFS). */
export function fakeAdapterRepo(name: string, o: FakeAdapterOptions = {}): FakeRepo {
  const files: FakeFile[] = [{ path: 'adapter_config.json', content: o.config ?? adapterConfigText(o.base ?? 'acme/base', o.rank ?? 8), lfs: false }];
  const weightsName = o.weightsName === undefined ? 'adapter_model.safetensors' : o.weightsName;
  if (weightsName !== null) files.push({ path: weightsName, content: o.weights ?? bytes(50_000, o.seed ?? 31), lfs: true });
  files.push(...(o.more ?? []));
  return fakeRepo(name, files);
}
