import { connect, createServer, type Server, type Socket } from 'node:net';

/** How often a rank ≥ 1 tries the rendezvous again while rank 0 is not yet listening. */
const RETRY_MS = 200;
/** What a rank says first on the rendezvous; anything else is not a rank. */
const HELLO = 'llmgw-sim-rank\n';
/**
 * With `loopMs`, a peer heard from not at all for this long is silent (a hang,
 * SIGSTOP, a partition: no FIN, no RST), so the collective waits on it. Well
 * above a busy machine's event-loop lag, so a slow tick is no silence.
 */
export const SILENT_PEER_MS = 500;

export interface SimRendezvousOptions {
  /** host:port of rank 0's rendezvous (the shard's leader_addr:leader_port). */
  addr: string;
  /** Rank 0 listens; every other rank connects. */
  leader: boolean;
  log: (level: 'INFO' | 'WARNING', where: string, text: string) => void;
  /** A peer's connection closed (its process died: the kernel sent FIN or RST): what the engine does then. */
  onPeerLost: () => void;
  /**
   * Rank 0 binds the port only this long after the start, as vLLM's TCPStore
   * is bound only once rank 0's first worker has imported vLLM and runs
   * init_process_group (V:vllm/distributed/parallel_state.py:1620-1626, 1685-1691).
   * Until then a connect is refused and the other ranks retry. Default: at once.
   */
  bindAfterMs?: number;
  /**
   * Every rank talks to its peers every `loopMs`, as SGLang's scheduler
   * broadcasts over gloo on every loop, idle or not
   * (S:python/sglang/srt/managers/scheduler_components/request_receiver.py:76-93, 153-216).
   * Then a peer heard from not at all for SILENT_PEER_MS is silent:
   * onPeerSilent, and onPeerBack when it talks again. Default: no talk.
   */
  loopMs?: number;
  onPeerSilent?: () => void;
  onPeerBack?: () => void;
}

/** With opts.loopMs: ticks to `s` every loop and tells when `s` goes silent and comes back; returns the stop. */
function talk(s: Socket, o: SimRendezvousOptions): () => void {
  if (o.loopMs === undefined) return () => {};
  let heardMs = Date.now();
  let silent = false;
  s.on('data', () => {
    heardMs = Date.now();
    if (!silent) return;
    silent = false;
    o.log('INFO', 'request_receiver.py:153', 'rendezvous: the silent peer talks again; the broadcast goes on');
    o.onPeerBack?.();
  });
  const tick = setInterval(() => {
    if (!s.destroyed) s.write('.');
    if (silent || Date.now() - heardMs < SILENT_PEER_MS) return;
    silent = true;
    o.log('WARNING', 'request_receiver.py:153', `rendezvous: no word from the peer for ${SILENT_PEER_MS} ms (no FIN: hung, stopped or cut off); the broadcast blocks`);
    o.onPeerSilent?.();
  }, o.loopMs);
  return () => clearInterval(tick);
}

/**
 * A multi-node gang's rendezvous as the sim plays it: rank 0 holds the port
 * (torch's TCPStore on MASTER_PORT, which vLLM's --master-port and SGLang's
 * --dist-init-addr name; once bound, global rank 0 holds it for the process
 * group's life, V:vllm/distributed/parallel_state.py:1620-1626,
 * S:python/sglang/srt/distributed/bootstrap.py:170-180) and every other rank
 * holds a connection to it for the gang's life. What a peer lost does is the
 * caller's, per engine:
 * - vLLM: the executor watches its local worker processes only
 *   (V:vllm/v1/executor/multiproc_executor.py:298-332). A leader whose remote
 *   worker is gone waits in its broadcast queue ("No available shared memory
 *   broadcast block found in 60 seconds", defined at
 *   V:vllm/distributed/device_communicators/shm_broadcast.py:103-107 and
 *   logged at INFO from acquire_write :679-682 and acquire_read :800-803)
 *   while /health stays 200, until a step's RPC times out
 *   (fake-vllm-gang.ts); a headless rank whose leader died never exits
 *   (V:vllm/entrypoints/cli/serve.py:207-223; vLLM issue 32136).
 * - SGLang (`loopMs`): a peer that closes ends every rank within about a
 *   second; only a silent one blocks (fake-sglang.ts).
 */
export function startSimRendezvous(o: SimRendezvousOptions): { close(): void } {
  const i = o.addr.lastIndexOf(':');
  const host = o.addr.slice(0, i).replace(/^\[|\]$/g, '');
  const port = Number(o.addr.slice(i + 1));
  let closed = false;
  if (o.leader) {
    const peers = new Set<Socket>();
    const server: Server = createServer((s) => {
      s.on('error', () => {});
      // A rank says so first, as a TCPStore client validates itself: a connection that says nothing
      // (a port probe, the agent's gang watch) joins nothing, and its close loses nothing.
      let quiet = () => {};
      s.once('data', (d) => {
        if (!d.toString().startsWith(HELLO)) return void s.destroy();
        // Said back, as a TCPStore server answers a client's validation: whatever else accepts there is no rank 0.
        s.write(HELLO);
        peers.add(s);
        quiet = talk(s, o);
        o.log('INFO', 'TCPStore.cpp:1', `rendezvous: rank joined from ${s.remoteAddress}:${s.remotePort} (${peers.size} peer(s))`);
      });
      s.on('close', () => {
        quiet();
        if (!peers.delete(s) || closed) return;
        o.log('WARNING', 'TCPStore.cpp:1', 'rendezvous: a peer rank disconnected');
        o.onPeerLost();
      });
    });
    // All interfaces, as TCPStore binds: the other nodes reach it at leader_addr.
    const bind = () => {
      if (closed) return;
      server.listen(port, '0.0.0.0', () => o.log('INFO', 'TCPStore.cpp:1', `rendezvous listening on port ${port}`));
    };
    server.on('error', (err) => o.log('WARNING', 'TCPStore.cpp:1', `rendezvous cannot listen on ${port}: ${err.message}`));
    const late = o.bindAfterMs ? setTimeout(bind, o.bindAfterMs) : undefined;
    if (late) o.log('INFO', 'parallel_state.py:1620', `rendezvous: the store is bound once the workers have imported the engine and run init_process_group, in ${o.bindAfterMs} ms`);
    else bind();
    return {
      close() {
        closed = true;
        clearTimeout(late);
        for (const s of peers) s.destroy();
        server.close();
      },
    };
  }
  let socket: Socket | undefined;
  let timer: NodeJS.Timeout | undefined;
  let quiet = () => {};
  const attempt = () => {
    if (closed) return;
    let joined = false;
    const s = connect({ host, port });
    socket = s;
    s.on('connect', () => s.write(HELLO));
    // Joined once rank 0 says it back: something else that accepts and closes (a proxy, a stale port) is retried.
    let heard = '';
    s.on('data', (d) => {
      if (joined) return;
      heard += d.toString();
      if (heard.length < HELLO.length) return;
      if (!heard.startsWith(HELLO)) return void s.destroy();
      joined = true;
      quiet = talk(s, o);
      o.log('INFO', 'TCPStore.cpp:1', `rendezvous: joined rank 0 at ${o.addr}`);
    });
    s.on('error', () => {});
    s.on('close', () => {
      quiet();
      if (closed) return;
      if (!joined) {
        timer = setTimeout(attempt, RETRY_MS);
        return;
      }
      o.log('WARNING', 'ProcessGroupNCCL.cpp:1', `rendezvous: rank 0 at ${o.addr} is gone`);
      o.onPeerLost();
    });
  };
  attempt();
  return {
    close() {
      closed = true;
      clearTimeout(timer);
      quiet();
      socket?.destroy();
    },
  };
}
