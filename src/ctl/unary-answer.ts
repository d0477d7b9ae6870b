import { failure } from '../lib/errors.js';
import { AdminCallError } from './admin-call-error.js';

/**
 * What a unary Connect call in JSON answered: the response's proto JSON on
 * HTTP 200; otherwise the Connect error `{code, message}`, thrown as an
 * AdminCallError. A body that is not JSON (a proxy's page, a truncated
 * answer) is a failure that shows its first bytes.
 */
export function unaryAnswer<Res>(method: string, status: number, body: Buffer): Res {
  const text = body.toString('utf8');
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw failure(`the agent answered ${method} with HTTP ${status} and a body that is not JSON: ${text.slice(0, 200)}`);
  }
  if (status === 200) return parsed as Res;
  const e = parsed as { code?: string; message?: string };
  throw new AdminCallError(e.code ?? 'unknown', e.message ?? `HTTP ${status}`);
}
