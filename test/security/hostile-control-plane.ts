import { create, type MessageInitShape } from '@bufbuild/protobuf';
import type { ConnectRouter } from '@connectrpc/connect';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import { createWritableIterable } from '@connectrpc/connect/protocol';
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { type AgentMessage, AgentService, type ControlMessage, ControlMessageSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { type AgentProcess, type AgentProcessOptions, cleanUpEnginesAfterTest, startAgentProcess } from '../helpers/agent-process.js';

type ControlMsg = MessageInitShape<typeof ControlMessageSchema>['msg'];

/**
 * The review's evil-cp: a bare AgentService that sends whatever a test
 * scripts once Register arrives, and validates nothing. The agent must
 * defend itself; no reference control plane in between filters anything.
 */
export interface HostileControlPlane {
  url: string;
  /** Every AgentMessage received and kept (see `keep`), across streams, in order. */
  received: AgentMessage[];
  /** Streams the agent has opened so far. */
  readonly streams: number;
  /** Sends to the newest stream (after its Register). */
  send(msg: ControlMsg): void;
  /** Resolves with the first message from now or earlier that matches; only kept messages are seen. */
  waitFor(pred: (m: AgentMessage) => boolean, timeoutMs?: number): Promise<AgentMessage>;
  /** Calls `fn` with every message received from now, kept or not; returns the unsubscribe. */
  onMessage(fn: (m: AgentMessage) => void): () => void;
  /**
   * The newest stream reads nothing more from the agent (the message in hand
   * excepted) until it closes; HTTP/2 still answers pings. Later streams read.
   */
  stopReading(): void;
  /**
   * Writes `make(0..n-1)` to the newest stream (after its Register), each once
   * the stream has taken the previous one: as fast as the agent reads, never
   * faster. Stops when that stream closes; resolves with how many it took.
   */
  flood(n: number, make: (i: number) => ControlMsg): Promise<number>;
  close(): Promise<void>;
}

export interface HostileControlPlaneOptions {
  /** Which messages `received` keeps (default all): a flood's answers would hold hundreds of MB in the test. */
  keep?: (m: AgentMessage) => boolean;
  /** Largest message taken from the agent; a larger one ends the stream. Connect's default (~4 GiB) unless set: 4 MiB is a stock gRPC server's. */
  readMaxBytes?: number;
}

interface Stream {
  out: ReturnType<typeof createWritableIterable<ControlMessage>>;
  registered: Promise<void>;
  closed: Promise<void>;
  stalled: boolean;
}

/**
 * The longest run of flood writes without giving this process's event loop
 * a turn. A write the stream buffers resolves in a microtask, so a flood
 * otherwise ran as one chain: under stress-ng on 2 cores it held the loop
 * 2.6-3.4 s, this server answered no HTTP/2 ping meanwhile, and the agent
 * rightly gave it up ("PING timed out", 1 s in the test config then, 5 s
 * since: PING_TIMEOUT_FLOOR_MS) after 1 645
 * of 50 000 StopShards. A real control plane answers pings while it sends.
 */
const FLOOD_SLICE_MS = 20;

export async function startHostileControlPlane(opts: HostileControlPlaneOptions = {}): Promise<HostileControlPlane> {
  const keep = opts.keep ?? (() => true);
  const received: AgentMessage[] = [];
  const waiters = new Set<() => void>();
  const listeners = new Set<(m: AgentMessage) => void>();
  let current: Stream | undefined;
  let streams = 0;
  // Resolves with the newest stream once its Register has arrived.
  let nextRegistered: Promise<Stream>;
  let onFirstRegister: (s: Stream) => void = () => {};
  const awaitNextStream = () => {
    nextRegistered = new Promise((r) => {
      onFirstRegister = r;
    });
  };
  awaitNextStream();
  let nextId = 1n;
  const message = (msg: ControlMsg) => create(ControlMessageSchema, { messageId: nextId++, msg });

  const routes = (router: ConnectRouter) => {
    router.service(AgentService, {
      connect: async function* (requests, ctx) {
        streams += 1;
        let onRegister = () => {};
        let onClosed = () => {};
        const stream: Stream = {
          out: createWritableIterable<ControlMessage>(),
          registered: new Promise<void>((r) => {
            onRegister = r;
          }),
          closed: new Promise<void>((r) => {
            onClosed = r;
          }),
          stalled: false,
        };
        current = stream;
        const close = () => {
          stream.out.close();
          onClosed();
        };
        void (async () => {
          const it = requests[Symbol.asyncIterator]();
          try {
            for (;;) {
              if (stream.stalled) {
                // Not pulling is what stops the reads: HTTP/2 flow control then stalls the agent's writes.
                await stream.closed;
                return;
              }
              const r = await it.next();
              if (r.done) return;
              const m = r.value;
              if (keep(m)) received.push(m);
              for (const l of listeners) l(m);
              if (m.msg.case === 'register') {
                onRegister();
                onFirstRegister(stream);
                awaitNextStream();
              }
              for (const w of waiters) w();
            }
          } catch {
            // The agent went away; the test sees it through what it waits for.
          } finally {
            close();
          }
        })();
        ctx.signal.addEventListener('abort', close, { once: true });
        yield* stream.out;
      },
    });
  };
  const server = http2.createServer(connectNodeAdapter({ routes, ...(opts.readMaxBytes ? { readMaxBytes: opts.readMaxBytes } : {}) }));
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on('session', (s) => {
    sessions.add(s);
    s.once('close', () => sessions.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  // The stream the next send or flood goes to: the newest, once registered.
  const registeredStream = (): Promise<Stream> => (current ? current.registered.then(() => current as Stream) : nextRegistered);

  return {
    url: `http://127.0.0.1:${port}`,
    received,
    get streams() {
      return streams;
    },
    send(msg) {
      void registeredStream().then((s) => s.out.write(message(msg)).catch(() => {}));
    },
    waitFor(pred, timeoutMs = 30_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const hit = received.find(pred);
          if (!hit) return;
          waiters.delete(check);
          clearTimeout(timer);
          resolve(hit);
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`no matching message from the agent in ${timeoutMs} ms`));
        }, timeoutMs);
        waiters.add(check);
        check();
      });
    },
    onMessage(fn) {
      listeners.add(fn);
      return () => listeners.delete(fn);
    },
    stopReading() {
      if (current) current.stalled = true;
    },
    async flood(n, make) {
      const s = await registeredStream();
      let closed = false;
      void s.closed.then(() => {
        closed = true;
      });
      let sliceStartedMs = performance.now();
      for (let i = 0; i < n; i++) {
        if (closed) return i;
        if (performance.now() - sliceStartedMs > FLOOD_SLICE_MS) {
          // A macrotask: the loop then reads this server's sockets and answers the agent's HTTP/2 pings.
          await new Promise<void>((resolve) => setImmediate(resolve));
          sliceStartedMs = performance.now();
        }
        // A write pending when the stream closes never settles: the close ends the wait instead.
        const took = await Promise.race([s.out.write(message(make(i))).then(() => true, () => false), s.closed.then(() => false)]);
        if (!took) return i;
      }
      return n;
    },
    async close() {
      for (const s of sessions) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/**
 * The real agent pointed at `cp`, every engine it starts killed when the
 * test ends; resolves once its Register (for its node id) has arrived.
 */
export async function bootAgentAgainst(cp: HostileControlPlane, o: Omit<AgentProcessOptions, 'server'>): Promise<AgentProcess> {
  cleanUpEnginesAfterTest(o.dirs);
  const agent = startAgentProcess({ ...o, server: cp.url });
  const nodeId = o.nodeId ?? 'node-a';
  await cp.waitFor((m) => m.msg.case === 'register' && m.msg.value.nodeId === nodeId);
  return agent;
}
