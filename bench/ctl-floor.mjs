#!/usr/bin/env node
/**
 * The floor of `ctl status`: one AdminService Status call over the admin
 * socket in the Connect JSON form, with node:http2 and nothing else, its
 * answer printed. What `llmgw ctl status --json` takes beyond this program is
 * its own overhead (argument handling, preferences, error mapping, output);
 * what this takes beyond `node -e 0` is Node's http2 and the agent's answer.
 * node bench/ctl-floor.mjs <socket>
 */
import http2 from 'node:http2';
import { connect } from 'node:net';

const session = http2.connect('http://localhost', { createConnection: () => connect(process.argv[2]) });
const req = session.request({ ':method': 'POST', ':path': '/llmgw.v1.AdminService/Status', 'content-type': 'application/json', 'connect-protocol-version': '1' });
const chunks = [];
req.on('data', (c) => chunks.push(c));
req.on('end', () => {
  process.stdout.write(`${JSON.stringify(JSON.parse(Buffer.concat(chunks).toString('utf8')), null, 2)}\n`);
  session.destroy();
});
req.end('{}');
