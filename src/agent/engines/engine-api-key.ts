/** The option strings both engines take for the API key (V:vllm/entrypoints/openai/cli_args.py, S:python/sglang/srt/server_args.py). */
const API_KEY_FLAG = '--api-key';

/**
 * The API key an engine will demand on /v1, from its command line
 * (`--api-key K` or `--api-key=K`; the last one wins, as in argparse) or,
 * when `envName` is given and the command line has none, that variable of
 * its environment (vLLM's VLLM_API_KEY: `args.api_key or [envs.VLLM_API_KEY]`,
 * V:vllm/entrypoints/serve/middleware/register.py:33). '' when it has none.
 * Readiness asks /v1/models, which both engines guard once a key is set
 * (V:vllm/entrypoints/serve/middleware/authenticate.py:11,59;
 * S:python/sglang/srt/utils/auth.py:100): without the key a keyed profile
 * loaded its model and then never became READY.
 *
 * The environment is the plan's (`env`: the profile's and the operator's
 * engines.<name>.env) over the agent's own (`inherited`), because the direct
 * launcher passes the agent's environment through to the engine
 * (launch-engine.ts engineEnv). An operator who exports VLLM_API_KEY to the
 * agent gets keyed engines, as vLLM run by hand in that shell would be, and
 * expects them to become READY, not to load and then wait forever on a 401
 * (review engine-fidelity-2 §3 N13). So the key is used knowingly rather than
 * stripped: stripping would silently turn such engines into open ones. Under
 * systemd-run the unit does not inherit it (systemdEngineEnv); the bearer
 * the probe then sends an unkeyed vLLM is ignored, as its middleware is not
 * installed without a key (register.py:33-36).
 */
export function engineApiKey(argv: readonly string[], env: Record<string, string>, envName?: string, inherited: NodeJS.ProcessEnv = process.env): string {
  let key: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] as string;
    if (a === API_KEY_FLAG) key = argv[i + 1] ?? '';
    else if (a.startsWith(`${API_KEY_FLAG}=`)) key = a.slice(API_KEY_FLAG.length + 1);
  }
  if (key !== undefined) return key;
  if (!envName) return '';
  // The plan's value wins over the agent's, empty included: Object.assign(env, plan.env) in engineEnv.
  if (Object.hasOwn(env, envName)) return env[envName] ?? '';
  return inherited[envName] ?? '';
}

/** SGLang's option for the key of its admin routes (S:python/sglang/srt/server_args.py; shared/fixtures/engines/sglang-server-flags.txt:72). */
const ADMIN_API_KEY_FLAG = '--admin-api-key';

/**
 * The admin key SGLang will demand on its ADMIN_OPTIONAL routes (pause and
 * continue generation, release and resume memory, update_weights_from_disk,
 * weights_checker), from its command line (`--admin-api-key K` or
 * `--admin-api-key=K`; the last one wins, as in argparse); '' when it has
 * none. With an admin key set those routes take it alone, the API key no
 * longer (S:python/sglang/srt/utils/auth.py:123-138): sending the API key
 * there made every sleep of such a profile fail with 401 (review
 * engine-fidelity-2 N5). SGLang reads no environment variable for it.
 */
export function engineAdminApiKey(argv: readonly string[]): string {
  let key = '';
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] as string;
    if (a === ADMIN_API_KEY_FLAG) key = argv[i + 1] ?? '';
    else if (a.startsWith(`${ADMIN_API_KEY_FLAG}=`)) key = a.slice(ADMIN_API_KEY_FLAG.length + 1);
  }
  return key;
}
