import { bearer, httpGet } from './http-probe.js';

/*
 * The version an engine says it is, read once it is READY (issue 47 item 5):
 * which sleeps it survives depends on it (sleep-survival.ts).
 */

/**
 * Where each engine says its version, and the field: vLLM `GET /version`
 * → `{"version": VLLM_VERSION}` (V:vllm/entrypoints/serve/instrumentator/basic.py:53-56,
 * outside the API key's guarded prefixes, V:vllm/entrypoints/serve/middleware/authenticate.py:11);
 * SGLang `GET /server_info` → `"version": __version__` among the server args
 * (S:python/sglang/srt/entrypoints/http_server.py:796-826, :820; it asks the
 * schedulers their state, so it is asked awake; its key is the API key's).
 */
const ROUTES: Record<string, string> = { vllm: '/version', sglang: '/server_info' };

/** SGLang's /server_info carries every server arg: more than a probe's 64 KiB cap allows for. */
const VERSION_BODY_MAX_BYTES = 1024 * 1024;
const VERSION_TIMEOUT_MS = 5000;

/** A version as an engine prints it: "0.27.1", "0.5.18", "0.24.0rc1", "0.11.0+cu129". */
const VERSION_SHAPE = /^[\w.+-]{1,64}$/;

/**
 * The engine's version, or a one-line reason it could not be read (the
 * engine has no such route, answered an error, or something that is not a
 * version). Never throws.
 */
export async function readEngineVersion(engine: string, baseUrl: string, apiKey: string, signal: AbortSignal): Promise<{ version: string } | { reason: string }> {
  const path = ROUTES[engine];
  if (!path) return { reason: `engine ${engine} has no version route` };
  try {
    const res = await httpGet(`${baseUrl}${path}`, { timeoutMs: VERSION_TIMEOUT_MS, signal, headers: bearer(apiKey), maxBytes: VERSION_BODY_MAX_BYTES });
    if (res.status !== 200) return { reason: `GET ${path} answered ${res.status}` };
    const v = (JSON.parse(res.body) as { version?: unknown }).version;
    if (typeof v !== 'string' || !VERSION_SHAPE.test(v)) return { reason: `GET ${path} gave no version` };
    return { version: v };
  } catch (err) {
    return { reason: `GET ${path}: ${err instanceof Error ? err.message : String(err)}` };
  }
}
