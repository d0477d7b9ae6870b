import { Code, ConnectError, type ConnectRouter, createContextKey, createContextValues, type HandlerContext } from '@connectrpc/connect';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import { type AgentMessage, AgentService, type ControlMessage } from '../gen/llmgw/v1/agent_pb.js';
import { errorMessage } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';
import type { AgentMessageReceiver } from './agent-message-receiver.js';
import { clientCertificateProblem } from './client-certificate-problem.js';
import type { NodeSession } from './node-session.js';
import type { NodeSessions } from './node-sessions.js';

/** Why the peer's client certificate is refused, set per request; undefined when acceptable. */
const CERTIFICATE_PROBLEM = createContextKey<string | undefined>(undefined, { description: 'client certificate problem' });
/** The stream's remote `address:port`, to name the agent that holds a node_id. */
const PEER = createContextKey<string>('an unknown peer', { description: 'peer address' });

/** AgentService.Connect: each agent stream becomes a NodeSession, read until either side ends it. */
export class AgentStreamHandler {
  readonly #sessions: NodeSessions;
  readonly #receiver: AgentMessageReceiver;
  readonly #log: Logger;
  readonly #listening: () => boolean;

  constructor(parts: { sessions: NodeSessions; receiver: AgentMessageReceiver; log: Logger; listening: () => boolean }) {
    this.#sessions = parts.sessions;
    this.#receiver = parts.receiver;
    this.#log = parts.log;
    this.#listening = parts.listening;
  }

  /** The HTTP request handler that serves AgentService (Connect, gRPC and gRPC-web). */
  requestHandler(): ReturnType<typeof connectNodeAdapter> {
    const routes = (router: ConnectRouter) => {
      router.service(AgentService, { connect: (requests, ctx) => this.#stream(requests, ctx) });
    };
    return connectNodeAdapter({
      routes,
      contextValues: (req) => createContextValues().set(CERTIFICATE_PROBLEM, clientCertificateProblem(req)).set(PEER, peerOf(req)),
    });
  }

  /** One agent stream: what it sends is read in #read; what we send is yielded from its session's outbox. */
  async *#stream(requests: AsyncIterable<AgentMessage>, ctx: HandlerContext): AsyncIterable<ControlMessage> {
    const refused = ctx.values.get(CERTIFICATE_PROBLEM);
    if (refused !== undefined) {
      this.#log.warn({ err: refused }, 'refused an agent stream');
      throw new ConnectError(refused, Code.Unauthenticated);
    }
    const session = this.#sessions.open(ctx.values.get(PEER));
    if (!this.#listening()) session.end('the control plane is closing');
    // connect-node does not tell a handler that its client went away; the
    // request iterable just ends, or the signal aborts. Both end the session.
    const onAbort = () => this.#sessions.ended(session, 'the stream was cancelled (the agent went away)');
    ctx.signal.addEventListener('abort', onAbort, { once: true });
    void this.#read(session, requests);
    try {
      yield* session.outbox;
      if (session.refusal) throw session.refusal;
    } finally {
      ctx.signal.removeEventListener('abort', onAbort);
      this.#sessions.ended(session, session.endReason ?? 'the response stream ended');
    }
  }

  async #read(session: NodeSession, requests: AsyncIterable<AgentMessage>): Promise<void> {
    let reason = 'the agent closed the stream';
    try {
      for await (const m of requests) {
        // A stream replaced by a newer one from the same node is history: what
        // it still says would overwrite fresher state.
        if (session.ended) break;
        session.lastMessageAt = new Date();
        try {
          this.#receiver.receive(session, m);
        } catch (err) {
          this.#log.error({ err, node: session.nodeId }, 'internal error handling an agent message');
        }
      }
    } catch (err) {
      reason = `the stream broke: ${errorMessage(err)}`;
    } finally {
      this.#sessions.ended(session, reason);
    }
  }
}

function peerOf(req: { socket?: unknown }): string {
  const socket = req.socket as { remoteAddress?: string; remotePort?: number } | undefined;
  if (!socket?.remoteAddress) return 'an unknown peer';
  const host = socket.remoteAddress.includes(':') ? `[${socket.remoteAddress}]` : socket.remoteAddress;
  return socket.remotePort ? `${host}:${socket.remotePort}` : host;
}
