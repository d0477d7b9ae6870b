import { connect as netConnect, type Socket } from 'node:net';
import { type Client, Code, ConnectError, createClient } from '@connectrpc/connect';
import { Http2SessionManager, createConnectTransport } from '@connectrpc/connect-node';
import { codeToString } from '@connectrpc/connect/protocol-connect';
import { AdminService } from '../gen/llmgw/v1/admin_pb.js';
import { AdminCallError, operatorError } from './admin-call-error.js';
import { dialAdminSocket } from './dial-admin-socket.js';

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
      // The agent stopping mid-stream, or its connection dropping, reads as Unavailable or Aborted.
      if (err.code === Code.Aborted) return operatorError(new AdminCallError('unavailable', err.rawMessage), socketPath);
      return operatorError(new AdminCallError(codeToString(err.code), err.rawMessage), socketPath);
    },
    close: () => sessionManager.abort(),
  };
}
