/**
 * The vLLM double's ranks across nodes (fake-vllm.ts): what each rank holds
 * open for its peers, and when, and what it does when a peer goes.
 *
 * - TP/PP (--nnodes, --master-port): rank 0 holds torch's TCPStore for the
 *   process group's life (V:vllm/distributed/parallel_state.py:1620-1626), but
 *   binds it only once its workers have imported vLLM and run
 *   init_process_group (:1685-1691): --sim-store-bind-after delays it, and the
 *   load with it. The headless ranks hold a connection to it
 *   (sim-rendezvous.ts).
 * - DP (--data-parallel-rpc-port, fewer local than total DP ranks): the port
 *   is the start-up handshake only, closed once every engine is up
 *   (sim-dp-handshake.ts).
 */
import type { FakeBatchScheduler } from './fake-batch-scheduler.js';
import type { FakeVllmOptions } from './fake-vllm-args.js';
import type { LogLevel } from './engine-log.js';
import { dialDpHandshake, startDpHandshakeServer } from './sim-dp-handshake.js';
import { startSimRendezvous } from './sim-rendezvous.js';

/** VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS's default (V:vllm/envs.py:1767-1769). */
export const EXECUTE_MODEL_TIMEOUT_S = 300;

/** How often a leader whose peer is gone looks whether a step is in flight. */
const STEP_POLL_MS = 100;

export interface VllmGangParts {
  o: FakeVllmOptions;
  env: NodeJS.ProcessEnv;
  scheduler: FakeBatchScheduler;
  /** The engine is dead (/health 503, then the launcher's watchdog exits). */
  failEngine: (why: string) => void;
  log: (level: LogLevel, where: string, text: string) => void;
}

export interface VllmGang {
  /** Rank 0 may start loading (its store is bound). */
  beforeLoad: Promise<void>;
  /** Rank 0 has loaded (`localUp`): resolves once it may serve, every DP engine up and the handshake port closed. */
  beforeServe(localUp: Promise<void>): Promise<void>;
  /** A headless DP rank's engines have loaded: they say READY on the handshake. */
  headlessLoaded(): void;
  close(): void;
}

/**
 * `int(os.getenv("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "300"))`
 * (V:vllm/envs.py:1767-1769); a value int() refuses falls back here to the
 * default rather than raising.
 */
export function executeModelTimeoutS(env: NodeJS.ProcessEnv): number {
  const v = env.VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS?.trim();
  return v !== undefined && /^\d+$/.test(v) ? Number(v) : EXECUTE_MODEL_TIMEOUT_S;
}

export function startVllmGang(p: VllmGangParts): VllmGang {
  const { o, log } = p;
  const closers: (() => void)[] = [];
  let beforeLoad = Promise.resolve();
  let beforeServe = (localUp: Promise<void>) => localUp;
  let headlessLoaded = () => {};

  if (o.nnodes > 1 && o.dp <= 1 && o.masterPort !== undefined) {
    const leader = o.nodeRank === 0;
    const bindAfterMs = leader ? o.knobs.storeBindAfterMs : undefined;
    const rdv = startSimRendezvous({
      addr: `${o.masterAddr.includes(':') ? `[${o.masterAddr}]` : o.masterAddr}:${o.masterPort}`,
      leader,
      bindAfterMs,
      log: (level, where, text) => log(level, where, text),
      onPeerLost: () => (leader ? leaderLostPeer(p, closers) : headlessLostLeader(p)),
    });
    closers.push(() => rdv.close());
    if (bindAfterMs) beforeLoad = new Promise((r) => closers.push(clearing(setTimeout(r, bindAfterMs))));
  }

  const local = o.dpLocal ?? o.dp;
  if (o.dp > 1 && local < o.dp && o.dpRpcPort !== undefined) {
    const host = o.dpAddress ?? '127.0.0.1';
    const addr = `${host.includes(':') ? `[${host}]` : host}:${o.dpRpcPort}`;
    if (!o.headless) {
      const hs = startDpHandshakeServer({ addr, remoteEngines: o.dp - local, log: (l, w, t) => log(l, w, t) });
      closers.push(() => hs.close());
      beforeServe = (localUp) => hs.up(localUp);
    } else {
      let loaded: () => void = () => {};
      const dial = dialDpHandshake({ addr, loaded: new Promise<void>((r) => (loaded = r)), log: (l, w, t) => log(l, w, t) });
      closers.push(() => dial.close());
      headlessLoaded = () => loaded();
    }
  }

  return {
    beforeLoad,
    beforeServe: (localUp) => beforeServe(localUp),
    headlessLoaded: () => headlessLoaded(),
    close: () => {
      for (const c of closers) c();
    },
  };
}

function clearing(t: NodeJS.Timeout): () => void {
  return () => clearTimeout(t);
}

/**
 * Rank 0 whose remote worker is gone: its scheduler output waits in the
 * broadcast queue ("No available shared memory broadcast block found in 60
 * seconds", V:vllm/distributed/device_communicators/shm_broadcast.py:103-107,
 * logged at INFO from acquire_write :679-682) and no step makes progress,
 * /health still 200. A step in flight is a collective RPC with
 * timeout=VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS (V:vllm/v1/executor/multiproc_executor.py:340-364):
 * when it expires the TimeoutError is fatal to EngineCore
 * (V:vllm/v1/engine/core.py:1352-1357), /health answers 503 and the API
 * server's 5 s watchdog exits (V:vllm/entrypoints/launchers/launcher.py:180-202).
 * With no request, no step is issued and it waits for ever.
 */
function leaderLostPeer(p: VllmGangParts, closers: (() => void)[]): void {
  p.log('INFO', 'shm_broadcast.py:679', 'No available shared memory broadcast block found in 60 seconds. This typically happens when some processes are hanging or doing some time-consuming work (e.g. compilation, weight/kv cache quantization).');
  p.scheduler.stall();
  const timeoutS = executeModelTimeoutS(p.env);
  const watch = setInterval(() => {
    if (p.scheduler.running(false) === 0) return;
    clearInterval(watch);
    const expiry = setTimeout(() => {
      p.log('ERROR', 'multiproc_executor.py:360', 'TimeoutError: RPC call to execute_model timed out.');
      p.log('ERROR', 'core.py:1352', 'EngineCore encountered a fatal error.');
      p.failEngine('execute_model timed out');
    }, timeoutS * 1000);
    closers.push(clearing(expiry));
  }, STEP_POLL_MS);
  closers.push(() => clearInterval(watch));
}

/** A headless TP/PP rank whose rank 0 is gone waits in the collective and never exits (V:vllm/entrypoints/cli/serve.py:207-223). */
function headlessLostLeader(p: VllmGangParts): void {
  p.log('WARNING', 'serve.py:210', 'rank 0 is gone; waiting in the collective (a headless rank never exits)');
}
