import type { GangMember, StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import type { EngineName } from '../../lib/engine-names.js';
import { durationMs } from '@bufbuild/protobuf/wkt';
import { dataParallelSize } from '../engines/vllm/vllm-engine.js';
import { DEFAULT_STARTUP_TIMEOUT_MS } from '../supervisor/shard/shard-settle.js';

/**
 * What proves a gang's rank 0 alive after start-up, per engine and parallel
 * shape, from each engine's source (issue 47; engine-fidelity-3 E1, §4).
 * Whatever the shape, rank 0's agent answering comes first and wins over
 * any socket; a socket only speaks for a rank 0 whose agent does not answer.
 * `V:` is vLLM at 2f41c894, `S:` SGLang at v0.5.18 (71de97b).
 */
export interface GangLivenessRule {
  engine: EngineName;
  shape: 'data-parallel' | 'tensor/pipeline-parallel';
  /** The socket whose accept (or 200) proves rank 0's engine alive. */
  proof: 'rendezvous-port' | 'api-health';
  /** Why that socket is held for the gang's life, with its source. */
  holds: string;
  /** What is never evidence after start-up, with its source. */
  notEvidence: string;
}

export const GANG_LIVENESS: readonly GangLivenessRule[] = [
  {
    engine: 'vllm',
    shape: 'data-parallel',
    proof: 'api-health',
    holds:
      "rank 0's API server (its http_port, bound on 0.0.0.0) answers /health 200 while its engines live, 503 once the engine core is dead " +
      '(V:vllm/entrypoints/serve/instrumentator/health.py:22-33); it listens only once every DP engine has reported READY',
    notEvidence:
      "--data-parallel-rpc-port (leader_port) is the engines' start-up handshake: bound in a `with` block that ends once every engine is up " +
      '(V:vllm/v1/engine/utils.py:1202-1248); headless DP ranks dial it at start only (V:vllm/entrypoints/cli/serve.py:225-249). Closed by design after READY.',
  },
  {
    engine: 'vllm',
    shape: 'tensor/pipeline-parallel',
    proof: 'rendezvous-port',
    holds:
      "--master-port is torch's TCPStore, held by global rank 0 for the process group's life once bound (V:vllm/distributed/parallel_state.py:1620-1626)",
    notEvidence:
      "the store is bound late: only when rank 0's first worker runs init_process_group (V:vllm/distributed/parallel_state.py:1685-1691), after its API server, " +
      'engine core and workers were spawned and imported vLLM (tens of seconds); a port never yet seen open proves nothing until rank 0 could have started (its startup_timeout)',
  },
  {
    engine: 'sglang',
    shape: 'tensor/pipeline-parallel',
    proof: 'rendezvous-port',
    holds: "--dist-init-addr is torch's TCPStore, held by rank 0 for the process group's life (S:python/sglang/srt/distributed/bootstrap.py:170-180)",
    notEvidence: 'a port never yet seen open, until rank 0 could have started (its startup_timeout)',
  },
  {
    engine: 'sim',
    shape: 'tensor/pipeline-parallel',
    proof: 'rendezvous-port',
    holds: "the sim's rank 0 holds its --rendezvous for its life, as a TCPStore (src/sim/sim-rendezvous.ts)",
    notEvidence: 'a port never yet seen open, until rank 0 could have started (its startup_timeout)',
  },
];

/** Where a rank whose agent does not answer can still be seen alive: a socket, or nothing. */
export type Rank0Evidence =
  | { kind: 'rendezvous-port'; host: string; port: number; label: string }
  | { kind: 'api-health'; host: string; port: number; label: string }
  | { kind: 'none'; why: string };

/**
 * The evidence of peer `m` of shard `spec` (GANG_LIVENESS): only rank 0 has
 * any (a worker rank's sockets are its node's own: vLLM's headless ranks open
 * none, SGLang's serve /health on loopback). A vLLM data-parallel rank 0 is
 * judged by its API at leader_addr:<its http_port>, which the control plane
 * sends in GangMember.http_port; without it, by its agent alone.
 */
export function rank0Evidence(spec: StartShard, m: GangMember): Rank0Evidence {
  if (m.rank !== 0) return { kind: 'none', why: 'a worker rank holds no socket its peers can reach' };
  const host = spec.leaderAddr;
  if (host === '') return { kind: 'none', why: 'no leader_addr' };
  const at = host.includes(':') ? `[${host}]` : host;
  if (isDataParallelVllm(spec)) {
    if (m.httpPort <= 0) return { kind: 'none', why: "its API port is unknown (no gang.members[0].http_port), and vLLM's rpc port closes after start-up" };
    return { kind: 'api-health', host, port: m.httpPort, label: `api ${at}:${m.httpPort}/health` };
  }
  if (spec.leaderPort <= 0) return { kind: 'none', why: 'no leader_port' };
  return { kind: 'rendezvous-port', host, port: spec.leaderPort, label: `rendezvous ${at}:${spec.leaderPort}` };
}

/** vLLM with --data-parallel-size > 1 across nodes (VllmEngine.serverArgs): the rpc port is no evidence. */
export function isDataParallelVllm(spec: StartShard): boolean {
  if (spec.profile?.engine !== 'vllm') return false;
  try {
    return dataParallelSize(spec.profile.args) > 1;
  } catch {
    // A shard whose args fail to parse never launched; nothing to watch.
    return false;
  }
}

/**
 * Until when a rendezvous never yet seen open proves nothing: rank 0 was
 * started with this rank (one placement), and may take its whole
 * startup_timeout to bind (vLLM's TCPStore comes after its workers imported
 * vLLM; DP's API after every engine is up), not this rank's settle or READY.
 */
export function rank0StartDeadlineMs(spec: StartShard, startedAtMs: number): number {
  const t = spec.profile?.startupTimeout;
  return startedAtMs + (t ? durationMs(t) : DEFAULT_STARTUP_TIMEOUT_MS);
}
