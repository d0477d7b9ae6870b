import { connect, createServer, type Server, type Socket } from 'node:net';

/** How often a rank ≥ 1 tries the rendezvous again while rank 0 is not yet listening. */
const RETRY_MS = 200;
/** What a rank says first on the rendezvous; anything else is not a rank. */
const HELLO = 'llmgw-sim-rank\n';

export interface SimRendezvousOptions {
  /** host:port of rank 0's rendezvous (the shard's leader_addr:leader_port). */
  addr: string;
  /** Rank 0 listens; every other rank connects. */
  leader: boolean;
  log: (level: 'INFO' | 'WARNING', where: string, text: string) => void;
  /** A peer's connection closed: what the engine does then (the leader stalls: see below). */
  onPeerLost: () => void;
}

/**
 * A multi-node gang's rendezvous as the sim plays it: rank 0 holds the port
 * (torch's TCPStore on MASTER_PORT, which vLLM's --master-port and SGLang's
 * --dist-init-addr name) and every other rank holds a connection to it for
 * the gang's life. A peer lost is logged and never ends the process: an
 * engine does not notice its remote ranks dying. vLLM's executor watches its
 * local worker processes only (V:vllm/v1/executor/multiproc_executor.py:298-332),
 * and a leader whose remote worker is gone waits in its broadcast queue
 * ("No available shared memory broadcast block found in 60 second",
 * V:vllm/distributed/device_communicators/shm_broadcast.py:396) while
 * /health stays 200; a headless rank whose leader died never exits (vLLM
 * issue 32136); SGLang ends a forward step only after --watchdog-timeout,
 * 300 s by default (S:python/sglang/srt/server_args.py:1246-1250), and its
 * ranks ≥ 1 answer /health 200 whatever their peers do
 * (S:python/sglang/srt/utils/common.py:3273-3296). So the agent, not the
 * engine, must end a broken gang (issue 40).
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
      s.once('data', (d) => {
        if (!d.toString().startsWith(HELLO)) return void s.destroy();
        peers.add(s);
        o.log('INFO', 'TCPStore.cpp:1', `rendezvous: rank joined from ${s.remoteAddress}:${s.remotePort} (${peers.size} peer(s))`);
      });
      s.on('close', () => {
        if (!peers.delete(s) || closed) return;
        o.log('WARNING', 'shm_broadcast.py:396', 'rendezvous: a peer rank disconnected; No available shared memory broadcast block found in 60 second (requests make no progress; /health stays 200)');
        o.onPeerLost();
      });
    });
    // All interfaces, as TCPStore binds: the other nodes reach it at leader_addr.
    server.listen(port, '0.0.0.0', () => o.log('INFO', 'TCPStore.cpp:1', `rendezvous listening on port ${port}`));
    server.on('error', (err) => o.log('WARNING', 'TCPStore.cpp:1', `rendezvous cannot listen on ${port}: ${err.message}`));
    return {
      close() {
        closed = true;
        for (const s of peers) s.destroy();
        server.close();
      },
    };
  }
  let socket: Socket | undefined;
  let timer: NodeJS.Timeout | undefined;
  const attempt = () => {
    if (closed) return;
    let joined = false;
    socket = connect({ host, port });
    socket.on('connect', () => {
      joined = true;
      socket?.write(HELLO);
      o.log('INFO', 'TCPStore.cpp:1', `rendezvous: joined rank 0 at ${o.addr}`);
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      if (closed) return;
      if (!joined) {
        timer = setTimeout(attempt, RETRY_MS);
        return;
      }
      // Blocks, as a rank in a collective whose peer is gone does: no exit, no rejoin.
      o.log('WARNING', 'ProcessGroupNCCL.cpp:1', `rendezvous: rank 0 at ${o.addr} is gone; waiting in the collective (no exit: the NCCL watchdog would take 10 minutes)`);
      o.onPeerLost();
    });
  };
  attempt();
  return {
    close() {
      closed = true;
      clearTimeout(timer);
      socket?.destroy();
    },
  };
}
