import { AdminCallError, notTheAgent } from './admin-call-error.js';

/**
 * What a unary Connect call in JSON answered: the response's proto JSON on
 * HTTP 200; otherwise the Connect error `{code, message}`, thrown as an
 * AdminCallError. A body that is not JSON (another program's page on the
 * socket, or no answer at all: HTTP 0) is notTheAgent, showing its first bytes.
 */
export function unaryAnswer<Res>(socket: string, method: string, status: number, body: Buffer): Res {
  const text = body.toString('utf8');
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    const answer = status === 0 ? 'it closed the connection without an answer' : `HTTP ${status} with a body that is not JSON: ${JSON.stringify(text.slice(0, 80))}`;
    throw notTheAgent(socket, method, answer);
  }
  if (status === 200) return parsed as Res;
  const e = parsed as { code?: string; message?: string };
  throw new AdminCallError(e.code ?? 'unknown', e.message ?? `HTTP ${status}`);
}
