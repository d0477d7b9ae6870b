import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Adapter folders as the engines' loaders read them: adapter_config.json (r, base) and adapter_model.safetensors. */
export class AdapterDirs {
  readonly root = mkdtempSync(join(tmpdir(), 'llmgw-lora-'));

  /** A new adapter folder `name` of rank `r`, its weights random bytes (or `weights`). */
  make(name: string, r = 8, base = 'org/model', weights: Buffer = randomBytes(256)): string {
    const dir = join(this.root, name);
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'adapter_config.json'), JSON.stringify({ r, lora_alpha: 16, base_model_name_or_path: base, target_modules: ['q_proj', 'v_proj'] }));
    writeFileSync(join(dir, 'adapter_model.safetensors'), weights);
    return dir;
  }

  cleanup(): void {
    rmSync(this.root, { recursive: true, force: true });
  }
}

export const postJson = (url: string, body: unknown) => fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

/** The text a completion answers for `model`. */
export async function answer(url: string, model: string, extra: Record<string, unknown> = {}): Promise<{ status: number; text: string; body: Record<string, unknown> }> {
  const res = await postJson(`${url}/v1/completions`, { model, prompt: 'hello there', max_tokens: 6, ...extra });
  const body = (await res.json()) as Record<string, unknown>;
  const choices = body.choices as { text: string }[] | undefined;
  return { status: res.status, text: choices?.[0]?.text ?? '', body };
}
