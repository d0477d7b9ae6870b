import { connect, createServer, type Socket } from 'node:net';

/** How often a headless DP rank dials rank 0's handshake port again while nothing listens (zmq reconnects). */
const RETRY_MS = 200;
/** What a DP engine says first on the handshake socket, then READY once it has loaded. */
const HELLO = 'llmgw-sim-dp-engine\n';
const READY = 'READY\n';

type Log = (level: 'INFO' | 'WARNING', where: string, text: string) => void;

function hostPort(addr: string): { host: string; port: number } {
  const i = addr.lastIndexOf(':');
  return { host: addr.slice(0, i).replace(/^\[|\]$/g, ''), port: Number(addr.slice(i + 1)) };
}

/**
 * vLLM data parallel across nodes, rank 0's side of the start-up handshake
 * on --data-parallel-rpc-port. The front end binds it in a `with
 * zmq_socket_ctx(local_handshake_address, zmq.ROUTER, bind=True)` block
 * that yields to launch the engines and then waits for every engine, local
 * and remote, to say READY (wait_for_engine_startup); leaving the block
 * closes the socket (V:vllm/v1/engine/utils.py:1202-1248). So the port
 * listens from the start until the engines are up, and never again: after
 * start-up nothing on rank 0 listens on it.
 *
 * `remoteEngines` DP engines run on other nodes (dp − dp_local). `up` waits
 * until each has said READY and the caller's own engines are up (`localUp`),
 * then closes the port.
 */
export function startDpHandshakeServer(o: { addr: string; remoteEngines: number; log: Log }): { up(localUp: Promise<void>): Promise<void>; close(): void } {
  const { port } = hostPort(o.addr);
  const held = new Set<Socket>();
  let ready = 0;
  let remoteReady: () => void = () => {};
  const remote = new Promise<void>((r) => {
    remoteReady = r;
  });
  if (o.remoteEngines <= 0) remoteReady();
  const server = createServer((s) => {
    s.on('error', () => {});
    held.add(s);
    s.on('close', () => held.delete(s));
    let said = '';
    let counted = false;
    let answered = false;
    s.on('data', (d) => {
      said += d.toString();
      // Something that is no DP engine (a port probe) is dropped, as zmq drops what is not its protocol.
      const n = Math.min(said.length, HELLO.length);
      if (said.slice(0, n) !== HELLO.slice(0, n)) return void s.destroy();
      if (said.length >= HELLO.length && !s.writableEnded && !answered) {
        answered = true;
        s.write(HELLO);
      }
      if (counted || !said.startsWith(HELLO + READY)) return;
      counted = true;
      ready++;
      o.log('INFO', 'utils.py:1240', `handshake: a remote DP engine is READY (${ready}/${o.remoteEngines})`);
      if (ready >= o.remoteEngines) remoteReady();
    });
  });
  server.on('error', (err) => o.log('WARNING', 'utils.py:1216', `handshake socket cannot bind ${port}: ${err.message}`));
  // Bound on every interface: the headless nodes dial it at --data-parallel-address.
  server.listen(port, '0.0.0.0', () => o.log('INFO', 'utils.py:1216', `handshake socket bound on port ${port} (open until every DP engine is up)`));
  const close = () => {
    for (const s of held) s.destroy();
    server.close();
  };
  return {
    async up(localUp) {
      await Promise.all([remote, localUp]);
      close();
      o.log('INFO', 'utils.py:1248', `every DP engine is up; handshake socket on port ${port} closed (nothing listens there from now on)`);
    },
    close,
  };
}

/**
 * A headless DP rank's side (V:vllm/entrypoints/cli/serve.py:225-249): its
 * engines dial rank 0's handshake address once at start, say READY when
 * loaded, and then talk over ports rank 0 chose with get_open_port; they hold
 * nothing on the rpc port afterwards.
 */
export function dialDpHandshake(o: { addr: string; loaded: Promise<void>; log: Log }): { close(): void } {
  const { host, port } = hostPort(o.addr);
  let closed = false;
  let timer: NodeJS.Timeout | undefined;
  let socket: Socket | undefined;
  const attempt = () => {
    if (closed) return;
    let joined = false;
    const s = connect({ host, port });
    socket = s;
    s.on('error', () => {});
    s.on('connect', () => s.write(HELLO));
    // Dialled once rank 0 answers: something else that accepts and closes is retried.
    let heard = '';
    s.on('data', (d) => {
      if (joined) return;
      heard += d.toString();
      if (heard.length < HELLO.length) return;
      if (!heard.startsWith(HELLO)) return void s.destroy();
      joined = true;
      o.log('INFO', 'serve.py:240', `handshake: dialled rank 0 at ${o.addr}`);
      void o.loaded.then(() => {
        if (closed || s.destroyed) return;
        s.end(READY);
        o.log('INFO', 'serve.py:245', 'handshake: READY sent; the rpc port is not used again');
      });
    });
    s.on('close', () => {
      if (!joined && !closed) timer = setTimeout(attempt, RETRY_MS);
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
