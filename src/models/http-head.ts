/**
 * The HTTP/1.1 text of a hub GET (hub-stream.ts): the request it writes, and
 * the head of the answer it reads, with nothing of the connection in it.
 */

/** What an answer's head says: its status, its headers (names in lower case, repeats joined), its body's length. */
export interface HttpHead {
  status: number;
  headers: Map<string, string>;
  /** Content-Length; undefined when absent or when the body is chunked. */
  contentLength: number | undefined;
  chunked: boolean;
}

/** A GET of `url` that closes its connection after the answer and asks for the bytes as stored (no encoding). */
export function requestText(url: URL, headers: Record<string, string>): string {
  const lines = [`GET ${url.pathname}${url.search} HTTP/1.1`, `Host: ${url.host}`, 'Connection: close', 'Accept-Encoding: identity'];
  for (const [k, v] of Object.entries(headers)) if (k.toLowerCase() !== 'accept-encoding' && k.toLowerCase() !== 'host') lines.push(`${k}: ${v}`);
  return `${lines.join('\r\n')}\r\n\r\n`;
}

/** The head's text, up to its blank line; throws on what is not an HTTP/1.x answer or on a Content-Length that is not a number. */
export function parseHttpHead(text: string): HttpHead {
  const [statusLine, ...headerLines] = text.split('\r\n');
  const m = /^HTTP\/1\.[01] (\d{3})/.exec(statusLine ?? '');
  if (!m) throw new Error(`not an HTTP/1.1 answer: ${JSON.stringify((statusLine ?? '').slice(0, 80))}`);
  const headers = new Map<string, string>();
  for (const line of headerLines) {
    const colon = line.indexOf(':');
    if (colon <= 0) continue;
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    headers.set(name, headers.has(name) ? `${headers.get(name)}, ${value}` : value);
  }
  const cl = headers.get('content-length');
  const contentLength = cl !== undefined && /^\d{1,15}$/.test(cl) ? Number(cl) : undefined;
  if (cl !== undefined && contentLength === undefined) throw new Error(`a Content-Length of ${JSON.stringify(cl.slice(0, 40))}`);
  const chunked = /chunked/i.test(headers.get('transfer-encoding') ?? '');
  return { status: Number(m[1]), headers, contentLength: chunked ? undefined : contentLength, chunked };
}

/** A host written as an address (v4 or v6), which TLS's SNI must not carry. */
export function isIp(host: string): boolean {
  return /^[\d.]+$/.test(host) || host.includes(':');
}
