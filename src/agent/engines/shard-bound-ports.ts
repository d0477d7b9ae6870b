import type { StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import { parallelism } from './shard-launch.js';

/** A TCP port of this node a shard's engine binds, or waits for until it is free, and how it came to use it. */
export interface BoundPort {
  port: number;
  /** "http_port 8000", or how the engine derived it. */
  what: string;
}

/*
 * SGLang's DP attention (--enable-dp-attention, or --dwdp-size > 1, which
 * turns it on: S:python/sglang/srt/server_args.py:6600-6632) talks over TCP,
 * on ports it derives (S:python/sglang/srt/server_args.py:9894-9925 at
 * 71de97b): from --dist-init-addr's port on a multi-node shard, else from
 * --port + ZMQ_TCP_PORT_DELTA (233, :9807); six ports from that port + 1
 * (or, past 65535, from that port - 7), and each node's launch
 * (S:python/sglang/srt/entrypoints/engine.py:1092-1094, every rank) waits
 * for all of them, and that port, to be free, failing after
 * SGLANG_WAIT_PORT_TIMEOUT (30 s) (:9945-9961;
 * S:python/sglang/srt/utils/network.py:56-97). Rank 0 also binds the port
 * handshake on --dist-init-addr's port, else --port, + 13
 * (DP_ATTENTION_HANDSHAKE_PORT_DELTA, :9808;
 * S:python/sglang/srt/managers/data_parallel_controller.py:426-460, 585).
 * Two shards whose ports are that close collide at start (review
 * engine-fidelity-3, E16): the agent holds the whole block for the shard.
 * Not seen: DeepSeek V4 with prefill context parallelism, which turns DP
 * attention on from the model (S:python/sglang/srt/arg_groups/deepseek_v4_hook.py:169),
 * and SGLANG_RUST_SERVER's dp_size more ports.
 */
const ZMQ_TCP_PORT_DELTA = 233;
const DP_ATTENTION_HANDSHAKE_PORT_DELTA = 13;
const NUM_DERIVED_PORTS = 6;
const MAX_PORT = 65535;

/** Whether SGLang args turn DP attention on: --enable-dp-attention, or --dwdp-size above 1. */
export function sglangDpAttention(args: readonly string[]): boolean {
  for (let i = 0; i < args.length; i++) {
    const a = args[i] as string;
    if (a === '--enable-dp-attention') return true;
    const size = a === '--dwdp-size' ? args[i + 1] : a.startsWith('--dwdp-size=') ? a.slice('--dwdp-size='.length) : undefined;
    if (size !== undefined && Number(size) > 1) return true;
  }
  return false;
}

/**
 * The ports of this node `spec`'s engine binds: its http_port, and for
 * SGLang with DP attention (in the profile's args or the operator's
 * `extraArgs`) the block it derives. Held by the agent's launch admission,
 * so that a second shard whose ports fall in it is refused at once.
 */
export function shardBoundPorts(spec: StartShard, extraArgs: readonly string[] = []): BoundPort[] {
  const ports: BoundPort[] = spec.httpPort > 0 ? [{ port: spec.httpPort, what: `http_port ${spec.httpPort}` }] : [];
  if (spec.profile?.engine !== 'sglang' || !sglangDpAttention([...(spec.profile?.args ?? []), ...extraArgs])) return ports;
  const multiNode = parallelism(spec).nnodes > 1;
  const from = multiNode ? { name: 'leader_port', port: spec.leaderPort } : { name: 'http_port', port: spec.httpPort };
  if (from.port <= 0) return ports;
  // The dist-init port: leader_port itself, or --port's derived one on one node (:9896-9900).
  const distInit = multiNode ? from.port : from.port + ZMQ_TCP_PORT_DELTA > MAX_PORT ? from.port - ZMQ_TCP_PORT_DELTA : from.port + ZMQ_TCP_PORT_DELTA;
  const base = distInit + NUM_DERIVED_PORTS > MAX_PORT ? distInit - NUM_DERIVED_PORTS - 1 : distInit + 1;
  const derived = [distInit, ...Array.from({ length: NUM_DERIVED_PORTS }, (_, i) => base + i)];
  if (spec.rank === 0) derived.push(from.port + DP_ATTENTION_HANDSHAKE_PORT_DELTA);
  for (const port of derived) {
    if (port === spec.httpPort) continue;
    const what = multiNode && port === from.port ? `leader_port ${port}` : `port ${port}, which SGLang's DP attention derives from ${from.name} ${from.port}`;
    ports.push({ port, what });
  }
  return ports;
}
