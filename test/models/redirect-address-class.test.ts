import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { type Server, createServer } from 'node:http';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkModelsConfig } from '../../src/agent/config/check-models-config.js';
import { BandwidthLimiter } from '../../src/models/bandwidth-limiter.js';
import { downloadBlob } from '../../src/models/download-blob.js';
import { isInternalHost, redirectRefusal } from '../../src/models/hub-stream.js';
import { redirectLookup } from '../../src/models/redirect-policy.js';

/*
 * Security review 4, F7: a redirect is judged by the class of the address it
 * reaches, whatever its spelling. The review's hub redirected a download to
 * http://[::ffff:127.0.0.1]:P/… (the URL parser writes it [::ffff:7f00:1]);
 * the node's own service answered, and the pull's error told its length.
 */

const cloudHub = new URL('https://hub.example.com/acme/m/resolve/c/w');
const to = (host: string) => new URL(`https://${host}/latest/meta-data/iam/security-credentials/node-role`);

describe('redirectRefusal by address class', () => {
  it.each([
    '[::ffff:127.0.0.1]',
    '[::ffff:7f00:1]',
    '[::127.0.0.1]',
    '[::ffff:0:7f00:1]',
    '[64:ff9b::7f00:1]',
    '[64:ff9b::a9fe:a9fe]',
    '2130706433',
    '0177.0.0.1',
    '0x7f.1',
    '127.1',
    '127.0.0.1.',
    'localhost.',
    'api.localhost',
    '[::1]',
    '[::]',
    '0.0.0.0',
    '0',
    '[fe80::1]',
    '169.254.169.254',
    '0xa9.0xfe.0xa9.0xfe',
    '[::ffff:169.254.169.254]',
  ])('never follows a hub elsewhere to %s, however it is spelt', (host) => {
    expect(redirectRefusal(cloudHub, to(host))).toMatch(/^the hub redirected to an internal address \(.+\), which is never followed$/);
    // Not even when the operator lists it: loopback, link-local and unspecified are never a mirror's.
    expect(redirectRefusal(cloudHub, to(host), [host, '127.0.0.1', '169.254.169.254'])).toMatch(/never followed/);
  });

  it('follows a private address only to a host the operator lists, by address or by name, whatever the redirecting host is', () => {
    const rackHub = new URL('http://10.0.0.5/x');
    expect(redirectRefusal(rackHub, new URL('http://10.0.0.6/blob'))).toBe(
      "the hub redirected to an internal address (10.0.0.6) that models.hub.redirect_hosts does not list; list it there if it is your mirror's",
    );
    expect(redirectRefusal(rackHub, new URL('http://10.0.0.6/blob'), ['10.0.0.6'])).toBeUndefined();
    // The listed address in another spelling is the same host.
    expect(redirectRefusal(rackHub, new URL('http://[::ffff:a00:6]/blob'), ['10.0.0.6'])).toBeUndefined();
    expect(redirectRefusal(cloudHub, new URL('https://192.168.7.7/blob'))).toMatch(/does not list/);
    expect(redirectRefusal(rackHub, new URL('http://[fd00::9]/blob'))).toMatch(/does not list/);
    // From the rack to loopback or the metadata service: never, listed or not.
    expect(redirectRefusal(rackHub, new URL('http://127.0.0.1:8080/'), ['127.0.0.1'])).toMatch(/never followed/);
    expect(redirectRefusal(rackHub, new URL('http://169.254.169.254/'), ['169.254.169.254'])).toMatch(/never followed/);
  });

  it('still follows the look-alikes: another port of the host that redirected, a public CDN, public addresses in mapped spelling', () => {
    expect(redirectRefusal(new URL('http://127.0.0.1:8000/x'), new URL('http://127.0.0.1:9000/blob'))).toBeUndefined();
    expect(redirectRefusal(new URL('http://10.0.0.5/x'), new URL('http://10.0.0.5:9000/blob'))).toBeUndefined();
    expect(redirectRefusal(cloudHub, new URL('https://cdn-lfs.huggingface.co/repos/ab/cd'))).toBeUndefined();
    expect(redirectRefusal(cloudHub, new URL('https://cdn-lfs.huggingface.co./repos/ab/cd'))).toBeUndefined();
    expect(redirectRefusal(cloudHub, new URL('https://8.8.8.8/x'))).toBeUndefined();
    expect(redirectRefusal(cloudHub, new URL('https://[::ffff:8.8.8.8]/x'))).toBeUndefined();
    expect(redirectRefusal(cloudHub, new URL('https://[2600:1f18::1]/x'))).toBeUndefined();
    expect(['172.32.0.1', '100.128.0.1', '8.8.8.8', 'huggingface.co'].some(isInternalHost)).toBe(false);
  });
});

describe('models.hub.redirect_hosts', () => {
  const where = () => 'agent.yaml';
  const config = (redirectHosts: string) => ({ cacheDir: '', hub: { endpoint: 'https://huggingface.co', tokenFile: '', redirectHosts }, maxConcurrent: 1 });
  it('takes private names and addresses, and refuses what it could never mean: loopback, link-local, public, a URL', () => {
    expect(() => checkModelsConfig(config('mirror-cdn.rack.internal, 10.0.0.6 [fd00::6]'), where)).not.toThrow();
    expect(() => checkModelsConfig(config('127.0.0.1'), where)).toThrow('models.hub.redirect_hosts: "127.0.0.1" is a loopback address, which no redirect is ever followed to');
    expect(() => checkModelsConfig(config('169.254.169.254'), where)).toThrow(/a link-local address/);
    expect(() => checkModelsConfig(config('8.8.8.8'), where)).toThrow(/a public address, which a redirect reaches without being listed/);
    expect(() => checkModelsConfig(config('http://mirror/x'), where)).toThrow(/is not a host name or address/);
  });
});

describe('a redirect to this node itself, over real sockets', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-redirect-'));
  const CONTENT = Buffer.alloc(4096, 7);
  let internal: Server;
  let hub: Server;
  let internalPort = 0;
  let hubUrl = '';
  const internalGot: string[] = [];
  let target = '';

  beforeAll(async () => {
    // The node's own service (the review's internal.mjs), on loopback.
    internal = createServer((req, res) => {
      internalGot.push(`${req.method} ${req.url}`);
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"AccessKeyId":"ASIA-NODE-ROLE","SecretAccessKey":"secret"}');
    });
    await new Promise<void>((r) => internal.listen(0, '127.0.0.1', r));
    internalPort = (internal.address() as { port: number }).port;
    // The hub, another host of loopback's /8: it redirects /evil/… to `target`, serves /cdn/… itself.
    hub = createServer((req, res) => {
      if (req.url?.startsWith('/cdn/')) return void res.writeHead(200, { 'content-length': String(CONTENT.length) }).end(CONTENT);
      res.writeHead(302, { location: target }).end();
    });
    await new Promise<void>((r) => hub.listen(0, '127.0.0.2', r));
    hubUrl = `http://127.0.0.2:${(hub.address() as { port: number }).port}`;
  });
  afterAll(async () => {
    await new Promise<void>((r) => internal.close(() => r()));
    await new Promise<void>((r) => hub.close(() => r()));
    rmSync(dir, { recursive: true, force: true });
  });

  const download = (name: string) =>
    downloadBlob(
      {
        path: 'creds.json',
        url: `${hubUrl}/evil/resolve/c/${name}`,
        size: CONTENT.length,
        sha256: createHash('sha256').update(CONTENT).digest('hex'),
        blobId: 'unused',
        incompletePath: join(dir, `${name}.incomplete`),
        blobPath: join(dir, name),
      },
      { headers: {}, limiter: new BandwidthLimiter(undefined), signal: AbortSignal.timeout(20_000) },
    );

  it.each(['[::ffff:127.0.0.1]', '[::ffff:7f00:1]', '2130706433', '0177.0.0.1', '127.0.0.1.', '127.0.0.1', 'localhost'])(
    'refuses the hub at 127.0.0.2 redirecting to %s: the service is never asked, and the error tells no length',
    async (host) => {
      internalGot.length = 0;
      target = `http://${host}:${internalPort}/latest/meta-data/iam/security-credentials/x`;
      const err = await download(`f-${internalGot.length}-${host.replace(/\W/g, '')}`).then(
        () => new Error('downloaded'),
        (e: unknown) => e as Error,
      );
      expect(err.message).toMatch(/^creds\.json: cannot download from http:\/\/127\.0\.0\.2:\d+: the hub redirected to an internal address \(.+\), which is never followed$/);
      expect(err.message).not.toMatch(/\d+ of \d+ bytes|at byte/);
      expect(internalGot).toEqual([]);
    },
  );

  it('follows the look-alike: the same host on the same or another path, and downloads the file', async () => {
    target = `${hubUrl}/cdn/blob`;
    const r = await download('ok');
    expect(r.fetched).toBe(CONTENT.length);
  });

  it('judges a name by the addresses it resolves to as the socket connects (the lookup hook), whichever it is given first', async () => {
    internalGot.length = 0;
    const refused = await new Promise<string>((resolve) => {
      const s = connect({ host: 'localhost', port: internalPort, lookup: redirectLookup(new URL(hubUrl), 'localhost', []) });
      s.on('connect', () => {
        s.destroy();
        resolve('connected');
      });
      s.on('error', (e) => resolve(e.message));
    });
    expect(refused).toMatch(/^the hub redirected to an internal address \(localhost at (127\.0\.0\.1|::1)\), which is never followed$/);
    expect(internalGot).toEqual([]);
  });
});
