import { connect as netConnect, type Socket } from 'node:net';
import { type Client, Code, ConnectError, createClient } from '@connectrpc/connect';
import { Http2SessionManager, createConnectTransport } from '@connectrpc/connect-node';
import { codeToString } from '@connectrpc/connect/protocol-connect';
import { AdminService } from '../gen/llmgw/v1/admin_pb.js';
import { LlmgwError } from '../lib/errors.js';
import { AGENT_UNIT_HINT, AdminCallError, notTheAgent, operatorError } from './admin-call-error.js';
import { dialAdminSocket } from './dial-admin-socket.js';

/** Node's codes for bytes on an HTTP/2 session that are not HTTP/2 frames. */
const HTTP2_PROTOCOL_ERROR = /^ERR_HTTP2_(ERROR|SESSION_ERROR)$/;

export interface AdminClient {
  client: Client<typeof AdminService>;
  /** Turns what a call threw into the error an operator sees. */
  explain(err: unknown): unknown;
  close(): void;
}

/**
 * A Connect client of AdminService over the agent's socket (HTTP/2), for the
 * streaming calls. The socket is dialled first, so that "not running" and
 * "permission denied" are told apart before any call (dialAdminSocket).
 */
export async function openAdminClient(socketPath: string): Promise<AdminClient> {
  let first: Socket | undefined = await dialAdminSocket(socketPath);
  const createConnection = () => {
    const s = first ?? netConnect(socketPath);
    first = undefined;
    return s;
  };
  const sessionManager = new Http2SessionManager('http://localhost', {}, { createConnection });
  const transport = createConnectTransport({ httpVersion: '2', baseUrl: 'http://localhost', sessionManager });
  return {
    client: createClient(AdminService, transport),
    explain: (err) => {
      if (!(err instanceof ConnectError)) return err;
      // Node's HTTP/2 client on a socket that answers in HTTP/1.1 (another program's, a web server's): its bare
      // "Protocol error" named neither the socket nor what to do.
      if (HTTP2_PROTOCOL_ERROR.test(String((err.cause as { code?: unknown } | undefined)?.code))) {
        return notTheAgent(socketPath, 'the streaming calls', `it does not speak HTTP/2: ${err.rawMessage}`);
      }
      // A socket that closes every connection unread (or an agent gone mid-stream): "http/2 stream closed with error
      // code CANCEL" alone said neither where nor what to do.
      if (err.code === Code.Canceled && /^http\/2 stream closed/.test(err.rawMessage)) {
        return new LlmgwError('unreachable', `the connection on ${socketPath} closed without an answer (${err.rawMessage}): if the agent runs (\`${AGENT_UNIT_HINT}\`), check that this is its admin socket (--socket / LLMGW_SOCKET, admin.socket in the agent config)`);
      }
      // The agent stopping mid-stream, or its connection dropping, reads as Unavailable or Aborted.
      if (err.code === Code.Aborted) return operatorError(new AdminCallError('unavailable', err.rawMessage), socketPath);
      return operatorError(new AdminCallError(codeToString(err.code), err.rawMessage), socketPath);
    },
    close: () => sessionManager.abort(),
  };
}
