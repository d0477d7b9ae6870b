/** The parts of an HTTP/1.1 response a unary Connect call needs. */
export interface Http1Response {
  status: number;
  body: Buffer;
}

const HEAD_END = Buffer.from('\r\n\r\n', 'latin1');

/**
 * An HTTP/1.1 response from the bytes received so far: undefined while it is
 * incomplete (`ended`: the peer closed, so what is there is all there is).
 * The body is framed by Content-Length, by chunked transfer coding, or by
 * the end of the connection, as RFC 9112 section 6.3 orders them. Throws on
 * what no HTTP/1.1 server sends, so that a wrong answer is never read as a
 * right one.
 */
export function parseHttp1Response(data: Buffer, ended: boolean): Http1Response | undefined {
  const headEnd = data.indexOf(HEAD_END);
  if (headEnd === -1) {
    if (ended) throw new Error('the connection closed before the response headers ended');
    return undefined;
  }
  const lines = data.subarray(0, headEnd).toString('latin1').split('\r\n');
  const statusLine = /^HTTP\/1\.[01] (\d{3})(?: |$)/.exec(lines[0] ?? '');
  if (!statusLine) throw new Error(`not an HTTP/1.1 status line: ${JSON.stringify((lines[0] ?? '').slice(0, 80))}`);
  const status = Number(statusLine[1]);
  let chunked = false;
  let length: number | undefined;
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(':');
    if (colon <= 0) throw new Error(`not an HTTP header line: ${JSON.stringify(line.slice(0, 80))}`);
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    if (name === 'transfer-encoding') chunked = value.toLowerCase().split(',').at(-1)?.trim() === 'chunked';
    else if (name === 'content-length') {
      if (!/^\d+$/.test(value) || (length !== undefined && length !== Number(value))) throw new Error(`a bad Content-Length: ${JSON.stringify(value)}`);
      length = Number(value);
    }
  }
  const rest = data.subarray(headEnd + HEAD_END.length);
  if (chunked) return dechunk(rest, ended, status);
  if (length !== undefined) {
    if (rest.length >= length) return { status, body: rest.subarray(0, length) };
    if (ended) throw new Error(`the connection closed after ${rest.length} of ${length} body bytes`);
    return undefined;
  }
  return ended ? { status, body: rest } : undefined;
}

/** The body of a chunked response, once its last (empty) chunk has come; trailers are ignored. */
function dechunk(data: Buffer, ended: boolean, status: number): Http1Response | undefined {
  const parts: Buffer[] = [];
  let at = 0;
  for (;;) {
    const lineEnd = data.indexOf('\r\n', at, 'latin1');
    if (lineEnd === -1) break;
    const sizeText = data.subarray(at, lineEnd).toString('latin1').split(';')[0]?.trim() ?? '';
    if (!/^[0-9a-fA-F]{1,8}$/.test(sizeText)) throw new Error(`a bad chunk size: ${JSON.stringify(sizeText.slice(0, 20))}`);
    const size = Number.parseInt(sizeText, 16);
    if (size === 0) return { status, body: Buffer.concat(parts) };
    const start = lineEnd + 2;
    if (data.length < start + size + 2) break;
    parts.push(data.subarray(start, start + size));
    at = start + size + 2;
  }
  if (ended) throw new Error('the connection closed inside a chunked body');
  return undefined;
}
