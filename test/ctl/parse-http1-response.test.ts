import { describe, expect, it } from 'vitest';
import { parseHttp1Response } from '../../src/ctl/parse-http1-response.js';

const b = (s: string) => Buffer.from(s, 'latin1');

describe('parseHttp1Response', () => {
  it('reads a body framed by Content-Length, and waits while it is incomplete', () => {
    const whole = 'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"a":"bcd"}';
    expect(parseHttp1Response(b(whole.slice(0, 20)), false)).toBeUndefined();
    expect(parseHttp1Response(b(whole.slice(0, -1)), false)).toBeUndefined();
    expect(parseHttp1Response(b(whole), false)).toEqual({ status: 200, body: b('{"a":"bcd"}') });
  });

  it('joins a chunked body once its last chunk has come, chunk extensions and trailers ignored', () => {
    const whole = 'HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\n{"cod\r\n7\r\ne":"x"}\r\n0\r\nX-Trailer: 1\r\n\r\n';
    expect(parseHttp1Response(b(whole.slice(0, whole.indexOf('7\r\n'))), false)).toBeUndefined();
    expect(parseHttp1Response(b(whole), false)).toEqual({ status: 404, body: b('{"code":"x"}') });
  });

  it('takes the rest of the connection as the body when neither frames it', () => {
    expect(parseHttp1Response(b('HTTP/1.0 500 x\r\n\r\n{}'), false)).toBeUndefined();
    expect(parseHttp1Response(b('HTTP/1.0 500 x\r\n\r\n{}'), true)).toEqual({ status: 500, body: b('{}') });
  });

  it('refuses what no HTTP/1.1 server sends, and a connection cut short', () => {
    expect(() => parseHttp1Response(b('SSH-2.0-x\r\n\r\n'), false)).toThrow(/status line/);
    expect(() => parseHttp1Response(b('HTTP/1.1 200 OK\r\nno colon\r\n\r\n'), false)).toThrow(/header line/);
    expect(() => parseHttp1Response(b('HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n'), false)).toThrow(/Content-Length/);
    expect(() => parseHttp1Response(b('HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{}'), true)).toThrow(/2 of 9/);
    expect(() => parseHttp1Response(b('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n'), false)).toThrow(/chunk size/);
    expect(() => parseHttp1Response(b('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"'), true)).toThrow(/chunked/);
    expect(() => parseHttp1Response(b('HTTP/1.1 200 OK\r\n'), true)).toThrow(/headers/);
  });
});
