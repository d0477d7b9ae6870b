import type { StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import { exactNcclList } from './nccl-selectors.js';

/** Parallelism as engines take it: 0 (unset in proto) means 1. */
export function parallelism(spec: StartShard): { tp: number; pp: number; nnodes: number } {
  const p = spec.profile;
  return {
    tp: Math.max(p?.tensorParallelSize ?? 0, 1),
    pp: Math.max(p?.pipelineParallelSize ?? 0, 1),
    nnodes: Math.max(spec.nnodes, 1),
  };
}

/** Rank 0 serves HTTP; the other ranks of a multi-node shard are workers. */
export function servesHttp(spec: StartShard): boolean {
  return Math.max(spec.nnodes, 1) === 1 || spec.rank === 0;
}

/** The name the API serves the model under; the model itself when the profile leaves it empty (vLLM's rule too). */
export function servedModelName(spec: StartShard): string {
  return spec.profile?.servedModelName || spec.profile?.model || '';
}

/**
 * The environment of one rank, in layers, later winning: the profile's
 * variables (validation has already refused every name outside the engine's
 * allowed_env), then the agent's own (the NCCL and Gloo interfaces,
 * NCCL_IB_HCA from the validated hcas, NCCL's as exact lists, and what
 * else the engine needs of the node, `agentEnv`: store paths, host IPs,
 * HF_HUB_OFFLINE, a multi-node rank's checked HCA ports), then the
 * operator's engines.<name>.env, then what the agent owns outright.
 * A profile once overrode the agent's layer (VLLM_HOST_IP, NCCL_SOCKET_IFNAME,
 * NCCL_IB_HCA, HF_HUB_OFFLINE, the cache roots), undoing what the agent had
 * checked (security review 3, S8): the control plane's choices now sit
 * under the agent's, the operator's above both.
 * CUDA_VISIBLE_DEVICES is always the shard's own GPUs, in nvidia-smi's
 * numbering, which is PCI bus order: CUDA_DEVICE_ORDER=PCI_BUS_ID makes CUDA
 * count the same way (its default, FASTEST_FIRST, would put the engine on
 * another shard's GPU on a node with mixed GPUs).
 */
export function shardEnv(
  spec: StartShard,
  mgmtInterface: string,
  configured: Record<string, string>,
  profileEnv: Record<string, string> = spec.profile?.env ?? {},
  agentEnv: Record<string, string> = {},
): Record<string, string> {
  const env: Record<string, string> = {
    ...profileEnv,
    // Exact (`=eth0`): NCCL reads a plain name as a prefix, and `eth0` would
    // also take eth0.100 (nccl-selectors.ts). Gloo takes the name as it is.
    NCCL_SOCKET_IFNAME: exactNcclList(mgmtInterface === '' ? [] : [mgmtInterface]),
    GLOO_SOCKET_IFNAME: mgmtInterface,
    // The control plane's HCAs, exact; a multi-node rank's checked ports (agentEnv) win.
    ...(spec.hcas.length > 0 ? { NCCL_IB_HCA: exactNcclList(spec.hcas) } : {}),
    ...agentEnv,
  };
  Object.assign(env, configured);
  env.CUDA_VISIBLE_DEVICES = spec.gpuIndices.join(',');
  env.CUDA_DEVICE_ORDER = 'PCI_BUS_ID';
  return env;
}

/** "host:port", with IPv6 literals bracketed. */
export function hostPort(host: string, port: number): string {
  return host.includes(':') && !host.startsWith('[') ? `[${host}]:${port}` : `${host}:${port}`;
}
