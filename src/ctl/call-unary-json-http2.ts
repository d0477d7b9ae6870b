import { AdminCallError, agentUnreachable, operatorError } from './admin-call-error.js';
import { dialAdminSocket } from './dial-admin-socket.js';
import { unaryAnswer } from './unary-answer.js';

/**
 * callUnaryJson over HTTP/2, for an agent that serves only HTTP/2: one
 * started from a release before its admin socket spoke HTTP/1.1 and not
 * restarted since the package was upgraded. Loaded only then: node:http2
 * costs a cold `ctl status` about a tenth of its time.
 */
export async function callUnaryJsonHttp2<Res>(socketPath: string, method: string, request: object, timeoutMs: number): Promise<Res> {
  // Imported here, not above: in the bundled `ctl status` a static import would load it at every start.
  const { default: http2 } = await import('node:http2');
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
          try {
            resolve(unaryAnswer<Res>(socketPath, method, status, Buffer.concat(chunks)));
          } catch (err) {
            reject(err);
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
