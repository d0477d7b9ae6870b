/** The option strings both engines take for the API key (V:vllm/entrypoints/openai/cli_args.py, S:python/sglang/srt/server_args.py). */
const API_KEY_FLAG = '--api-key';

/**
 * The API key an engine will demand on /v1, from its command line
 * (`--api-key K` or `--api-key=K`; the last one wins, as in argparse) or,
 * when `envName` is given and the command line has none, that variable of
 * its environment (vLLM's VLLM_API_KEY: V:vllm/entrypoints/serve/middleware/register.py:33).
 * '' when it has none. Readiness asks /v1/models, which both engines guard
 * once a key is set (V:vllm/entrypoints/serve/middleware/authenticate.py:11,59;
 * S:python/sglang/srt/utils/auth.py:100): without the key a keyed profile
 * loaded its model and then never became READY.
 */
export function engineApiKey(argv: readonly string[], env: Record<string, string>, envName?: string): string {
  let key: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] as string;
    if (a === API_KEY_FLAG) key = argv[i + 1] ?? '';
    else if (a.startsWith(`${API_KEY_FLAG}=`)) key = a.slice(API_KEY_FLAG.length + 1);
  }
  if (key !== undefined) return key;
  return envName ? (env[envName] ?? '') : '';
}
