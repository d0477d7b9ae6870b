import type { StartShard } from '../../gen/llmgw/v1/agent_pb.js';

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
 * The environment of one rank. Later layers win, except that
 * CUDA_VISIBLE_DEVICES is always the shard's own GPUs: a profile or config
 * that set it would put the engine on GPUs another shard holds.
 */
export function shardEnv(spec: StartShard, mgmtInterface: string, configured: Record<string, string>): Record<string, string> {
  const env: Record<string, string> = {
    NCCL_SOCKET_IFNAME: mgmtInterface,
    GLOO_SOCKET_IFNAME: mgmtInterface,
  };
  if (spec.hcas.length > 0) env.NCCL_IB_HCA = spec.hcas.join(',');
  Object.assign(env, spec.profile?.env ?? {}, configured);
  env.CUDA_VISIBLE_DEVICES = spec.gpuIndices.join(',');
  return env;
}

/** "host:port", with IPv6 literals bracketed. */
export function hostPort(host: string, port: number): string {
  return host.includes(':') && !host.startsWith('[') ? `[${host}]:${port}` : `${host}:${port}`;
}
