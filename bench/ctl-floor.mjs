#!/usr/bin/env node
/**
 * The floor of `ctl status`: one AdminService Status call over the admin
 * socket in the Connect JSON form, as ctl makes it (HTTP/1.1 on node:net,
 * src/ctl/call-unary-json.ts; until 2026-12-01 this was HTTP/2 in
 * node:http2, as ctl was), its answer printed, and nothing else. What
 * `llmgw ctl status --json` takes beyond this program is its own overhead
 * (argument handling, preferences, error mapping, HTTP parsing, output);
 * what this takes beyond `node -e 0` is an ES module entry, node:net and the
 * agent's answer. node bench/ctl-floor.mjs <socket>
 */
import { connect } from 'node:net';

const socket = connect(process.argv[2]);
const chunks = [];
socket.on('data', (c) => chunks.push(c));
socket.on('end', () => {
  const text = Buffer.concat(chunks).toString('utf8');
  const head = text.slice(0, text.indexOf('\r\n\r\n'));
  let body = text.slice(head.length + 4);
  // The agent's Connect handler writes its answer in chunks; the last chunk is empty.
  if (/\r\ntransfer-encoding: chunked/i.test(head)) {
    let plain = '';
    for (let at = 0; ; ) {
      const eol = body.indexOf('\r\n', at);
      const size = Number.parseInt(body.slice(at, eol), 16);
      if (!size) break;
      plain += body.slice(eol + 2, eol + 2 + size);
      at = eol + 2 + size + 2;
    }
    body = plain;
  }
  process.stdout.write(`${JSON.stringify(JSON.parse(body), null, 2)}\n`);
});
socket.write('POST /llmgw.v1.AdminService/Status HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nConnect-Protocol-Version: 1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}');
