import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { compileDirsByEngine, ENGINE_CATALOG } from '../../../src/agent/engines/engine-catalog.js';
import { ENGINE_NAMES } from '../../../src/lib/engine-names.js';
import { hasCompileCache } from '../../../src/models/compile-cache.js';
import { StoreLayout } from '../../../src/models/store-layout.js';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'llmgw-engine-catalog-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** A file `rel` (folders and all) in `engine`'s cache for acme/chat, as the engine would write it. */
function compiled(layout: StoreLayout, engine: string, rel: string): void {
  const path = join(layout.engineCacheDir(process.geteuid?.() ?? 0, engine, 'acme/chat'), rel);
  mkdirSync(join(path, '..'), { recursive: true });
  writeFileSync(path, '# compiled');
}

describe('the engine catalog', () => {
  it('holds one wing for every engine name, in the order of the one list', () => {
    expect(Object.keys(ENGINE_CATALOG)).toEqual([...ENGINE_NAMES]);
  });

  it("sees SGLang's compile cache where its cache variable puts it (SGLANG_CACHE_DIR/torch_compile_cache), which the store once never looked at", async () => {
    const layout = new StoreLayout(join(dir, 'store'));
    compiled(layout, 'sglang', 'sglang/torch_compile_cache/ab12/graph.py');
    expect(await hasCompileCache(layout, 'sglang', 'acme/chat', compileDirsByEngine())).toBe(true);
    expect(await hasCompileCache(layout, 'vllm', 'acme/chat', compileDirsByEngine())).toBe(false);
  });

  it("counts neither engine's compile folder in the other's cache, nor anything for the sim, which compiles nothing", async () => {
    const layout = new StoreLayout(join(dir, 'store'));
    compiled(layout, 'vllm', 'sglang/torch_compile_cache/ab12/graph.py');
    compiled(layout, 'sglang', 'vllm/torch_compile_cache/ab12/graph.py');
    compiled(layout, 'sim', 'triton/ab/kernel.so');
    for (const engine of ENGINE_NAMES) expect(await hasCompileCache(layout, engine, 'acme/chat', compileDirsByEngine())).toBe(false);
  });

  it("counts torch's own kernels (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR) for both real engines", async () => {
    const layout = new StoreLayout(join(dir, 'store'));
    compiled(layout, 'vllm', 'torchinductor/fx/graph.py');
    compiled(layout, 'sglang', 'triton/ab/kernel.so');
    expect(await hasCompileCache(layout, 'vllm', 'acme/chat', compileDirsByEngine())).toBe(true);
    expect(await hasCompileCache(layout, 'sglang', 'acme/chat', compileDirsByEngine())).toBe(true);
  });
});
