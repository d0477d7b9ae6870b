import type { IncomingMessage, ServerResponse } from 'node:http';

/** Largest request body a simulated engine reads; it has no use for more. */
const MAX_BODY_BYTES = 1024 * 1024;

/** A JSON answer with its length; `close` asks the client to drop the connection (a server shutting down). */
export function sendJson(res: ServerResponse, status: number, body: unknown, close = false): void {
  const text = JSON.stringify(body);
  const headers: Record<string, string> = { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)) };
  if (close) headers.connection = 'close';
  res.writeHead(status, headers).end(text);
}

/** The request body as text; rejects past MAX_BODY_BYTES. */
export function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY_BYTES) {
        reject(new Error(`body larger than ${MAX_BODY_BYTES} bytes`));
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}
