import { execFileSync, spawn } from 'node:child_process';

/*
 * HTTP requests made by someone other than the test: another local user
 * (uid 65533, no group, as the security reviews' "any other local user"),
 * and a host on the network (a network namespace joined to this one by a
 * veth pair: its packets arrive through this host's input path, as a
 * router's do). For the sleep-mode port guard (security review 4, S6).
 */

/** Another local user: no account, no group (the reviews' uid 65533). */
export const OTHER_UID = 65533;

const FETCH = `
const [url, method, body] = process.argv.slice(1);
fetch(url, { method, body: body || undefined, headers: body ? { 'content-type': 'application/json' } : {}, signal: AbortSignal.timeout(10000) })
  .then(async (r) => { await r.text(); console.log('status ' + r.status); })
  .catch((e) => console.log('error ' + (e.cause?.code ?? e.name)));
`;

/** What one request got: "status 200", or "error ECONNREFUSED" (a reset SYN) and the like. */
export function requestAs(url: string, opts: { method?: string; body?: string; uid?: number; netns?: string } = {}): Promise<string> {
  const uid = opts.uid ?? OTHER_UID;
  const argv = ['setpriv', `--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', process.execPath, '-e', FETCH, url, opts.method ?? 'GET', opts.body ?? ''];
  const full = opts.netns ? ['ip', 'netns', 'exec', opts.netns, ...argv] : argv;
  return new Promise((resolve, reject) => {
    const child = spawn(full[0] as string, full.slice(1), { cwd: '/', stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (b: Buffer) => {
      out += b.toString();
    });
    child.stderr.on('data', (b: Buffer) => {
      err += b.toString();
    });
    child.once('error', reject);
    child.once('exit', (code) => (out.trim() ? resolve(out.trim()) : reject(new Error(`request as uid ${uid} printed nothing (exit ${code}): ${err.trim()}`))));
  });
}

export interface RemoteHost {
  /** The namespace's name, for requestAs's netns. */
  netns: string;
  /** This host's address as the remote host reaches it. */
  hostAddr: string;
  remove(): void;
}

/**
 * A host on the network, as far as this host's packet path can tell: a
 * network namespace whose veth peer here has `hostAddr`. remove() deletes
 * it (its veth pair goes with it); call it in afterAll.
 */
export function makeRemoteHost(): RemoteHost {
  const n = process.pid % 250;
  const netns = `llmgw-remote-${process.pid}`;
  const here = `lgr${process.pid}h`.slice(0, 15);
  const there = `lgr${process.pid}r`.slice(0, 15);
  const hostAddr = `10.201.${n}.1`;
  const ip = (...args: string[]) => execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  const remove = () => {
    try {
      ip('netns', 'del', netns);
    } catch {}
    try {
      ip('link', 'del', here);
    } catch {}
  };
  remove();
  try {
    ip('netns', 'add', netns);
    ip('link', 'add', here, 'type', 'veth', 'peer', 'name', there);
    ip('link', 'set', there, 'netns', netns);
    ip('addr', 'add', `${hostAddr}/30`, 'dev', here);
    ip('link', 'set', here, 'up');
    ip('netns', 'exec', netns, 'ip', 'addr', 'add', `10.201.${n}.2/30`, 'dev', there);
    ip('netns', 'exec', netns, 'ip', 'link', 'set', there, 'up');
    ip('netns', 'exec', netns, 'ip', 'link', 'set', 'lo', 'up');
  } catch (err) {
    remove();
    throw err;
  }
  return { netns, hostAddr, remove };
}
