import { connect } from 'node:net';
import { type LoadedTls, SYSTEM_TRUST_STORE } from './control-plane-transport.js';

/** How long the HTTP/1.1 probe waits for a first line. */
const PROBE_TIMEOUT_MS = 2000;

/** What Node's HTTP/2 client says when the peer's bytes are not HTTP/2 frames: an HTTP/1.1 server answering the preface. */
const HTTP2_PROTOCOL_ERROR = /ERR_HTTP2_ERROR|ERR_HTTP2_SESSION_ERROR|Protocol error/;
/** A TLS server that offers no ALPN protocol the client asked for (alert 120): it speaks TLS, not HTTP/2. */
const NO_ALPN = /no application protocol|alert number 120|ERR_HTTP2_ERROR.*ALPN/i;
/** OpenSSL's verdicts for a server certificate that no CA the agent trusts signed. */
const UNTRUSTED_SERVER =
  /SELF_SIGNED_CERT_IN_CHAIN|DEPTH_ZERO_SELF_SIGNED_CERT|UNABLE_TO_VERIFY_LEAF_SIGNATURE|UNABLE_TO_GET_ISSUER_CERT(_LOCALLY)?|CERT_SIGNATURE_FAILURE|self[- ]signed certificate|unable to verify the first certificate|unable to get local issuer certificate/;

/**
 * `why` a session failed, led by the setting that fixes it when the failure
 * says which (walkthrough 2, item 8): Node's "Protocol error
 * (ERR_HTTP2_ERROR)" for a `server` that is a web server, and an OpenSSL
 * chain error that names no file for a tls.ca that did not sign the control
 * plane's certificate. Anything else is `why` unchanged.
 */
export async function explainConnectFailure(server: string, why: string, tls: LoadedTls | undefined, probe = answersHttp1): Promise<string> {
  if (server.startsWith('https://') && NO_ALPN.test(why)) {
    return `server ${server} answered HTTP/1.1, not gRPC/Connect over HTTP/2 (its TLS offers no h2): check \`server\` (${why})`;
  }
  if (server.startsWith('http://') && HTTP2_PROTOCOL_ERROR.test(why) && (await probe(server))) {
    return `server ${server} answered HTTP/1.1, not gRPC/Connect over HTTP/2: check \`server\` (${why})`;
  }
  if (server.startsWith('https://') && UNTRUSTED_SERVER.test(why) && !/client certificate/.test(why)) {
    const ca = !tls || tls.ca === SYSTEM_TRUST_STORE ? 'empty: the system trust store' : tls.ca;
    return `the control plane's certificate is not signed by a CA in tls.ca (${ca}): set tls.ca to the CA that signed ${server}'s certificate (${why})`;
  }
  return why;
}

/**
 * Whether an h2c `server` answers a plain HTTP/1.1 request with an HTTP/1.x
 * status line: a web server, a proxy, a health endpoint on the wrong port.
 * One short request on its own connection, only after a failed session.
 */
export function answersHttp1(server: string): Promise<boolean> {
  const url = new URL(server);
  return new Promise((resolve) => {
    const socket = connect({ host: url.hostname.replace(/^\[|\]$/g, ''), port: Number(url.port || 80) });
    let head = '';
    const done = (yes: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(yes);
    };
    const timer = setTimeout(() => done(false), PROBE_TIMEOUT_MS);
    timer.unref();
    socket.setEncoding('latin1');
    socket.on('connect', () => socket.write(`GET / HTTP/1.1\r\nHost: ${url.host}\r\nUser-Agent: llmgw-agent\r\nConnection: close\r\n\r\n`));
    socket.on('data', (chunk: string) => {
      head += chunk;
      if (head.length >= 9) done(/^HTTP\/1\.[01] /.test(head));
    });
    socket.on('error', () => done(false));
    socket.on('end', () => done(/^HTTP\/1\.[01] /.test(head)));
  });
}
