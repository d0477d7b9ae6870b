import http2 from 'node:http2';
import { failure } from '../lib/errors.js';
import { AdminCallError, agentUnreachable, operatorError } from './admin-call-error.js';
import { dialAdminSocket } from './dial-admin-socket.js';

/** How long a unary call (status, adopt) may take before the agent counts as not answering. */
export const UNARY_TIMEOUT_MS = 30_000;

export interface UnaryCallOptions {
  timeoutMs?: number;
}

/**
 * One unary AdminService call in the Connect protocol's JSON form: a POST
 * whose body is the request's proto JSON, answered by the response's proto
 * JSON or by an error `{code, message}`. This is the form `curl` and
 * `buf curl` speak, spelled out with node:http2 on purpose: loading the
 * Connect and protobuf runtimes costs more than 100 ms, twice what Node
 * itself takes to start, and `ctl status` is typed by people waiting for it.
 * Streaming calls (logs, drain) use the Connect client instead.
 */
export async function callUnaryJson<Res>(socketPath: string, method: string, request: object, opts: UnaryCallOptions = {}): Promise<Res> {
  const timeoutMs = opts.timeoutMs ?? UNARY_TIMEOUT_MS;
  const socket = await dialAdminSocket(socketPath);
  const session = http2.connect('http://localhost', { createConnection: () => socket });
  try {
    return await new Promise<Res>((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(new AdminCallError('deadline_exceeded', `no answer within ${timeoutMs / 1000}s`));
      }, timeoutMs);
      const settle = (fn: () => void) => {
        clearTimeout(timer);
        fn();
      };
      session.once('error', (err) => settle(() => reject(agentUnreachable(socketPath, `the connection failed (${err.message})`))));
      const req = session.request({
        ':method': 'POST',
        ':path': `/llmgw.v1.AdminService/${method}`,
        'content-type': 'application/json',
        'connect-protocol-version': '1',
        'connect-timeout-ms': String(timeoutMs),
      });
      let status = 0;
      const chunks: Buffer[] = [];
      req.once('response', (headers) => {
        status = Number(headers[':status']);
      });
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.once('error', (err) => settle(() => reject(agentUnreachable(socketPath, `the call failed (${err.message})`))));
      req.once('end', () =>
        settle(() => {
          const text = Buffer.concat(chunks).toString('utf8');
          let body: unknown;
          try {
            body = JSON.parse(text);
          } catch {
            reject(failure(`the agent answered ${method} with HTTP ${status} and a body that is not JSON: ${text.slice(0, 200)}`));
            return;
          }
          if (status === 200) resolve(body as Res);
          else {
            const e = body as { code?: string; message?: string };
            reject(new AdminCallError(e.code ?? 'unknown', e.message ?? `HTTP ${status}`));
          }
        }),
      );
      req.end(JSON.stringify(request));
    });
  } catch (err) {
    throw err instanceof AdminCallError ? operatorError(err, socketPath) : err;
  } finally {
    session.destroy();
  }
}
