import { execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NftPortGuard } from '../../../src/lib/net/nft-port-guard.js';
import { makeRemoteHost, OTHER_UID, type RemoteHost, requestAs } from '../../helpers/http-as-other.js';

/*
 * The loopback guard under a sleep-mode engine's port (security review 4,
 * S6) with the real nft and kernel: a table of this test's own, real
 * listeners, requests from another uid, and from a host on the network (a
 * network namespace), which the guard must never touch.
 */

const TABLE = `llmgw_test_${process.pid}`;
const guard = new NftPortGuard({ table: TABLE });
let remote: RemoteHost;
const servers: Server[] = [];

async function listener(): Promise<number> {
  const s = createServer((_req, res) => res.end('ok\n'));
  servers.push(s);
  await new Promise<void>((resolve) => s.listen(0, '0.0.0.0', resolve));
  return (s.address() as AddressInfo).port;
}

beforeAll(() => {
  remote = makeRemoteHost();
});

afterAll(() => {
  for (const s of servers) s.close();
  remote?.remove();
  try {
    execFileSync('nft', ['delete', 'table', 'inet', TABLE], { stdio: 'ignore' });
  } catch {}
});

describe('NftPortGuard', () => {
  it('refuses another local uid on a guarded port, on loopback and on this host\'s own address, and lets root and a host on the network through', async () => {
    const port = await listener();
    await guard.guard(port, [0]);
    expect(await requestAs(`http://127.0.0.1:${port}/sleep`, { method: 'POST' })).toBe('error ECONNREFUSED');
    // Any of this host's own addresses goes out through loopback too.
    expect(await requestAs(`http://${remote.hostAddr}:${port}/`)).toBe('error ECONNREFUSED');
    expect(await requestAs(`http://127.0.0.1:${port}/`, { uid: 0 })).toBe('status 200');
    // The router's path: from another host, through the input path.
    expect(await requestAs(`http://${remote.hostAddr}:${port}/v1/models`, { netns: remote.netns })).toBe('status 200');
  });

  it('leaves every other port alone (look-alike: the same uid, a port not guarded)', async () => {
    const guarded = await listener();
    const open = await listener();
    await guard.guard(guarded, [0]);
    expect(await requestAs(`http://127.0.0.1:${open}/`)).toBe('status 200');
  });

  it('lets the uids given through, and replaces them when the port is guarded again', async () => {
    const port = await listener();
    await guard.guard(port, [0, OTHER_UID]);
    expect(await requestAs(`http://127.0.0.1:${port}/`)).toBe('status 200');
    await guard.guard(port, [0, 65534]);
    expect(await requestAs(`http://127.0.0.1:${port}/`)).toBe('error ECONNREFUSED');
    expect(await requestAs(`http://127.0.0.1:${port}/`, { uid: 65534 })).toBe('status 200');
    expect((await guard.guarded()).get(port)?.sort()).toEqual([0, 65534]);
  });

  it('opens the port again on release, and a release of a port never guarded changes nothing', async () => {
    const port = await listener();
    const other = await listener();
    await guard.guard(port, [0]);
    await guard.guard(other, [0]);
    await guard.release(port);
    expect(await requestAs(`http://127.0.0.1:${port}/`)).toBe('status 200');
    expect((await guard.guarded()).has(port)).toBe(false);
    await guard.release(1);
    expect(await requestAs(`http://127.0.0.1:${other}/`)).toBe('error ECONNREFUSED');
  });

  it('rejects in one line when nft cannot run, naming what to install', async () => {
    const missing = new NftPortGuard({ nft: '/nonexistent/nft', table: TABLE });
    await expect(missing.guard(40000, [0])).rejects.toThrow(/^\/nonexistent\/nft is not installed \(apt-get install nftables\)$/);
  });

  it('rejects when nft refuses (another uid has no CAP_NET_ADMIN): a script that cannot apply is an error, not a silent pass', async () => {
    // nft run as the other user: what an agent not run as root gets. The module and the three it imports are
    // copied where that user can read them, wherever the checkout lives (a clone under /root is not).
    const copy = mkdtempSync(join(tmpdir(), 'llmgw-nft-guard-'));
    try {
      chmodSync(copy, 0o755);
      for (const f of ['lib/net/nft-port-guard.js', 'lib/errors.js', 'lib/errno.js', 'lib/process/spawn-turn.js']) {
        mkdirSync(join(copy, dirname(f)), { recursive: true, mode: 0o755 });
        copyFileSync(new URL(`../../../dist/${f}`, import.meta.url), join(copy, f));
        chmodSync(join(copy, f), 0o644);
      }
      writeFileSync(join(copy, 'package.json'), '{"type":"module"}\n', { mode: 0o644 });
      const script = `import('${join(copy, 'lib/net/nft-port-guard.js')}').then((m) => new m.NftPortGuard({ table: '${TABLE}' }).guard(40001, [0])).then(() => console.log('guarded'), (e) => console.log(e.message))`;
      const out = execFileSync('setpriv', [`--reuid=${OTHER_UID}`, `--regid=${OTHER_UID}`, '--clear-groups', process.execPath, '-e', script], { cwd: '/', encoding: 'utf8' }).trim();
      expect(out).toMatch(/^nft -f -: .*(Operation not permitted|not permitted)/);
    } finally {
      rmSync(copy, { recursive: true, force: true });
    }
  });
});
