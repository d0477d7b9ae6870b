/**
 * Which environment variables a control plane's `profile.env` may set on an
 * engine. The agent runs as root and a profile comes from the network, so
 * this is an allowlist, not a denylist: NODE_OPTIONS, LD_PRELOAD, PATH,
 * PYTHONWARNINGS + BROWSER and GCONV_PATH each turn "set a variable" into
 * "run my code as root", and nobody can list every such name of every
 * runtime an engine loads. The operator's own `engines.<name>.env` is not
 * filtered: the operator is root already.
 */

/**
 * The default allowlist, per engine, when `engines.<name>.allowed_env` is
 * not configured: the families vLLM, SGLang, NCCL, PyTorch and the Hugging
 * Face libraries document for tuning, plus two single names real
 * deployments set from the control plane:
 * - CUDA_LAUNCH_BLOCKING: synchronous kernel launches, the first thing asked
 *   for when an engine dies with an asynchronous CUDA error; it only slows
 *   the engine.
 * - TOKENIZERS_PARALLELISM: silences the HF tokenizers fork warning (and its
 *   deadlock guard) that every vLLM worker otherwise prints; a boolean.
 * Nothing here names a file that is loaded as code, except through a path
 * the control plane cannot write; see PLUGIN_LOADING_ENV for the ones that do.
 */
export const DEFAULT_ALLOWED_ENV: readonly string[] = [
  'HF_*',
  'VLLM_*',
  'SGLANG_*',
  'NCCL_*',
  'TORCH_*',
  'OMP_NUM_THREADS',
  'CUDA_LAUNCH_BLOCKING',
  'TOKENIZERS_PARALLELISM',
];

/**
 * Set by the agent alone, whatever a pattern allows: CUDA_VISIBLE_DEVICES is
 * the shard's validated GPUs, and CUDA_DEVICE_ORDER must stay PCI_BUS_ID for
 * nvidia-smi's indices to name the same GPUs in CUDA (the default,
 * FASTEST_FIRST, reorders mixed-GPU nodes). NVIDIA_VISIBLE_DEVICES moves a
 * containerised engine to other GPUs the same way.
 */
export const AGENT_OWNED_ENV: readonly string[] = ['CUDA_VISIBLE_DEVICES', 'CUDA_DEVICE_ORDER', 'NVIDIA_VISIBLE_DEVICES'];

/**
 * What the agent decides for each start, whatever the operator allows a
 * profile (security review 4, S8): HF_HUB_OFFLINE is 1 when the model is
 * whole in the node's store (engine-cache-env.ts) and unset otherwise, a
 * judgement of the agent's; a profile's HF_HUB_OFFLINE=0 started an engine
 * online against it, =1 one that then fails on the first file missing.
 * Refused from a profile even when allowed_env names it; the operator may
 * set it in engines.<name>.env.
 */
export const AGENT_DECIDED_ENV: readonly string[] = ['HF_HUB_OFFLINE'];

/**
 * Inside NCCL_*, but each names a shared library NCCL dlopen()s: a control
 * plane that also chose the model (whose files land in the HF cache) could
 * point one at a downloaded .so. Refused from a profile even when a pattern
 * matches; an operator may still set them in engines.<name>.env.
 */
export const PLUGIN_LOADING_ENV: readonly string[] = ['NCCL_NET_PLUGIN', 'NCCL_TUNER_PLUGIN', 'NCCL_PROFILER_PLUGIN', 'NCCL_ENV_PLUGIN'];

/**
 * Names inside the allowed families that are levers rather than tuning:
 * each names a file, directory, endpoint, plugin or config the engine reads,
 * writes or sends to (security review 2, N2): NCCL_CONF_FILE sets the
 * refused plugin variables from a file, NCCL_DEBUG_FILE has root write any
 * path, HF_ENDPOINT sends the operator's HF_TOKEN anywhere,
 * VLLM_LOGGING_CONFIG_PATH is fed to dictConfig (which calls any callable),
 * HF_HOME=/etc, TORCH_EXTENSIONS_DIR, VLLM_PLUGINS. `_ROOT` (engine-fidelity
 * review 2, N11): vLLM loads compiled code (inductor and Triton output, AOT
 * bytecode) from under VLLM_CACHE_ROOT (V:vllm/envs.py:703-708;
 * V:vllm/compilation/backends.py:1068-1070, decorators.py:528-558), so a
 * profile that moves it onto files it shaped runs them; VLLM_CONFIG_ROOT
 * (envs.py:694-699) is where vLLM reads its config files. Refused from a
 * profile unless the operator names the variable itself (not a pattern) in
 * engines.<name>.allowed_env. Security review 3, S8 added the names the
 * shape missed: TORCH_TRACE writes into any directory, NCCL_COMM_ID and
 * VLLM_DP_MASTER_IP dial a host the control plane chose, NCCL_SOCKET_IFNAME
 * and NCCL_IB_HCA move NCCL's traffic (and undo the check that a shard's
 * hcas are the inventory's), VLLM_USE_MODELSCOPE fetches from another hub
 * past models.hub.endpoint and HF_HUB_OFFLINE, VLLM_LOGGING_STREAM names a
 * Python object to import. Security review 4, S8: TORCH_DTRACE (TORCH_TRACE's
 * directory under another name) and TORCH_LOGS_OUT (a file torch's loggers
 * append to), by reading torch/_logging/_internal.py (_init_logs). So the
 * shape is by kind, not by the names met so far: a name that ends in (or
 * holds as one of its words) a file, path, directory, root, home, output,
 * URL, endpoint, host, address, port or socket, any trace sink (…TRACE), and
 * any mode switch (…_MODE, …_OFFLINE) is a lever.
 */
export const LEVER_ENV_SHAPE = new RegExp(
  [
    // Ends in a word naming where the engine reads, writes or dials, plural or not.
    '_(FILE|PATH|DIR|HOME|ROOT|ENDPOINT|URL|URI|SOCKET|IP|ADDR|ADDRESS|HOST|PORT|ID|IFNAME|HCA|STREAM|OUT|OUTPUT|CACHE)S?$',
    // Holds such a word inside: TORCH_DIR_OF_X, VLLM_OUT_FILE_X.
    '_(FILE|PATH|DIR|ENDPOINT|URL|URI|ADDR|OUT|OUTPUT)S?_',
    // A trace sink under any spelling (TORCH_TRACE, TORCH_DTRACE), a switch of mode or of being online.
    'TRACE$',
    '_TRACE_',
    '_MODE$',
    '_OFFLINE$',
    '_MODELSCOPE$',
    '_PLUGINS?(_|$)',
    '_CONF(IG)?(_|$)',
  ].join('|'),
);

/**
 * Levers whose names do not say so: vLLM's insecure (pickle) serialization,
 * its dev-mode endpoints (/collective_rpc, sleep, pause) and runtime LoRA
 * loading, and SGLang's switch that changes what /health means (the agent
 * probes /health_generate, but a router may not): engine-fidelity review §1.3.
 */
export const LEVER_ENV_NAMES: readonly string[] = [
  'VLLM_ALLOW_INSECURE_SERIALIZATION',
  'VLLM_SERVER_DEV_MODE',
  'VLLM_ALLOW_RUNTIME_LORA_UPDATING',
  'SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION',
  // torch.load's weights_only off: a checkpoint's pickle runs code (security review 3, S8).
  'TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD',
];

/** A POSIX-portable variable name; anything else (`=`, NUL, spaces) is refused before it reaches execve. */
export const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** An allowlist entry: a variable name, or a name prefix followed by one `*`. */
export const ENV_PATTERN = /^[A-Za-z_][A-Za-z0-9_]*\*?$/;

/** Whether `name` matches one pattern: exactly, or by prefix for a pattern ending in `*`. */
export function matchesEnvPattern(name: string, pattern: string): boolean {
  return pattern.endsWith('*') ? name.startsWith(pattern.slice(0, -1)) : name === pattern;
}

/**
 * Why a profile may not set `name`, or undefined when it may. The sentence
 * names the variable and what the operator can do about it.
 */
export function refuseProfileEnv(name: string, allowed: readonly string[], engine: string): string | undefined {
  if (!ENV_NAME.test(name)) return `profile env name ${JSON.stringify(name)} is not a valid variable name`;
  if (AGENT_OWNED_ENV.includes(name)) return `profile env sets ${name}, which the agent owns (it assigns GPUs from gpu_indices)`;
  if (AGENT_DECIDED_ENV.includes(name)) {
    return `profile env sets ${name}, which the agent decides for each start (offline when the model is whole in the node's store); only the operator may set it, in engines.${engine}.env`;
  }
  if (PLUGIN_LOADING_ENV.includes(name)) {
    return `profile env sets ${name}, which loads a shared library; only the operator may set it, in engines.${engine}.env`;
  }
  if ((LEVER_ENV_SHAPE.test(name) || LEVER_ENV_NAMES.includes(name)) && !allowed.includes(name)) {
    if (!allowed.some((p) => matchesEnvPattern(name, p))) {
      return `profile env sets ${name}, which engines.${engine}.allowed_env does not allow (allowed: ${allowed.join(', ') || 'none'})`;
    }
    return `profile env sets ${name}, which names a file, directory, endpoint, plugin or switch the engine acts on; a pattern does not allow it: list ${name} itself in engines.${engine}.allowed_env`;
  }
  if (allowed.some((p) => matchesEnvPattern(name, p))) return undefined;
  return `profile env sets ${name}, which engines.${engine}.allowed_env does not allow (allowed: ${allowed.join(', ') || 'none'})`;
}
