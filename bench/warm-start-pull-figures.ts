/**
 * Figure 14b: the model store's pull (download, sha256, rename, links,
 * manifest) of the bench's model beside a plain download and curl of the
 * same URLs, alternated round by round: unthrottled on this host, and again
 * through a relay of a 1 Gb/s link. The pull and the plain download run in
 * child processes that time themselves; curl is timed from outside.
 */
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, rmSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { join } from 'node:path';
import { REPO_ROOT } from '../test/helpers/run-cli.js';
import type { FakeHub } from '../test/models/fake-hub.js';
import { median } from './bench-support.js';
import { ms } from './command-timing.js';
import type { BenchRow } from './fleet-figure.js';
import { CHILD_CPU_END, CHILD_CPU_START, type RoundCpu, childCpu, cpuNote, shellChildrenCpu, withHubCpu } from './pull-cpu.js';
import { MiB, REPO, modelBytes, throttledLink } from './warm-start-model.js';

/** 14b: the pull moves at least this share of what curl moves for the same files on the same link (issue 36, item 8). */
const PULL_BOUND = 0.9;
/**
 * 14b over a link: a node's 1 Gb/s link (about 119 MiB/s), the TCP relay of
 * 14a in front of the hub, through which the pull and curl both fetch.
 */
const GIGABIT_BYTES_PER_S = 119 * MiB;

const mbps = (bytes: number, msTaken: number) => bytes / MiB / (msTaken / 1000);

/**
 * Runs a child to its end without blocking this process, whose event loop
 * serves the hub (spawnSync would leave every request unanswered).
 */
function run(argv: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0] as string, argv.slice(1), { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c) => {
      stdout += c;
    });
    child.stderr.on('data', (c) => {
      stderr += c;
    });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** A child node process that times its own transfer, so that both sides of 14b pay the same process start outside the figure; `setups` gets what it printed as its set-up time, `cpus` its CPU and the hub's. */
async function timedChild(script: string, setups?: number[], cpus?: RoundCpu[]): Promise<number> {
  const r = await withHubCpu(() => run([process.execPath, '--input-type=module', '-e', script]));
  const cpu = childCpu(r.stdout);
  if (cpus && cpu) cpus.push({ ...cpu, hub: r.hub });
  if (r.code !== 0) throw new Error(`14b child exited ${r.code}: ${r.stderr.trim().split('\n').find((l) => /Error/.test(l)) ?? r.stderr.slice(-300)}`);
  const m = /^took (\d+(?:\.\d+)?)$/m.exec(r.stdout);
  if (!m) throw new Error(`14b child printed no time: ${r.stdout}`);
  const setup = /^setup (\d+(?:\.\d+)?)$/m.exec(r.stdout);
  if (setups && setup) setups.push(Number(setup[1]));
  return Number(m[1]);
}

/** The store's pull of the whole repo into a fresh store at `dir`, unthrottled, from dist/. */
function pullScript(hubUrl: string, dir: string): string {
  const dist = (p: string) => JSON.stringify(join(REPO_ROOT, 'dist/models', p));
  return `import { pullModel } from ${dist('pull-model.js')};
import { StoreLayout } from ${dist('store-layout.js')};
import { ConcurrencyLimit } from ${dist('concurrency-limit.js')};
import { BandwidthLimiter } from ${dist('bandwidth-limiter.js')};
${CHILD_CPU_START}
const t0 = performance.now();
let firstFile = 0;
const r = await pullModel({ repo: ${JSON.stringify(REPO)}, revision: 'main', include: [] }, {
  layout: new StoreLayout(${JSON.stringify(dir)}), hub: { endpoint: ${JSON.stringify(hubUrl)}, tokenFile: '' },
  budget: 4 * 1024 ** 3, concurrency: new ConcurrencyLimit(4), limiter: new BandwidthLimiter(undefined), signal: new AbortController().signal,
  onEvent: (e) => { if (e.kind === 'file-start' && firstFile === 0) firstFile = performance.now(); } });
const took = performance.now() - t0;
if (r.fetchedBytes !== ${modelBytes()}) throw new Error('fetched ' + r.fetchedBytes);
console.log('took ' + took.toFixed(1));
console.log('setup ' + (firstFile - t0).toFixed(1));
${CHILD_CPU_END}`;
}

/**
 * A plain download of the same URLs, the same four at once
 * (models.max_concurrent's default), streamed to files; with `fsync`, each
 * file synced to disk after, as the pull syncs every blob before its rename.
 */
function plainScript(urls: string[], dir: string, fsync: boolean): string {
  return `import { createWriteStream, mkdirSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
mkdirSync(${JSON.stringify(dir)}, { recursive: true });
const urls = ${JSON.stringify(urls)};
const t0 = performance.now();
await Promise.all(urls.map(async (u, i) => {
  const res = await fetch(u);
  if (!res.ok) throw new Error(u + ' ' + res.status);
  const path = ${JSON.stringify(dir)} + '/f' + i;
  await pipeline(Readable.fromWeb(res.body), createWriteStream(path));
  if (${fsync}) { const fh = await open(path, 'r+'); await fh.sync(); await fh.close(); }
}));
console.log('took ' + (performance.now() - t0).toFixed(1));`;
}

/**
 * The durable floor: the same URLs, all at once, each read from its socket
 * into one buffer of a megabyte (net's onread), written with writeSync,
 * datasynced in the background every 8 MiB (one sync at a time per file)
 * and once more at its end, as the pull writes a blob; with `hash`, each
 * read also sha256-hashed before its write, as the pull's one stream is.
 * No revision look-up, lock, record or rename: what a download as durable
 * as the pull's costs on this host's disk, timed from its first connect.
 */
function floorScript(urls: string[], dir: string, hash: boolean): string {
  return `import { connect } from 'node:net';
import { createHash } from 'node:crypto';
import { closeSync, fdatasync, mkdirSync, openSync, writeSync } from 'node:fs';
mkdirSync(${JSON.stringify(dir)}, { recursive: true });
const datasync = (fd) => new Promise((resolve, reject) => fdatasync(fd, (err) => (err ? reject(err) : resolve())));
const get = (u, i) => new Promise((resolve, reject) => {
  const url = new URL(u);
  const buf = Buffer.allocUnsafeSlow(1024 * 1024);
  const fd = openSync(${JSON.stringify(dir)} + '/f' + i, 'w');
  const sha = ${hash} ? createHash('sha256') : undefined;
  let head = true, length = 0, at = 0, syncedAt = 0, syncing;
  const socket = connect({ host: url.hostname, port: Number(url.port), onread: { buffer: buf, callback: (n) => {
    let from = 0;
    if (head) {
      const end = buf.subarray(0, n).indexOf('\\r\\n\\r\\n');
      const text = buf.subarray(0, end).toString('latin1');
      if (!/^HTTP\\/1\\.1 200/.test(text)) return reject(new Error(u + ': ' + text.split('\\r\\n')[0]));
      length = Number(/content-length: *(\\d+)/i.exec(text)[1]);
      from = end + 4;
      head = false;
    }
    const chunk = buf.subarray(from, n);
    sha?.update(chunk);
    for (let done = 0; done < chunk.length; ) done += writeSync(fd, chunk, done, chunk.length - done, at + done);
    at += chunk.length;
    if (at - syncedAt >= 8 * 1024 * 1024 && syncing === undefined) {
      syncedAt = at;
      syncing = datasync(fd).finally(() => { syncing = undefined; });
    }
    if (at < length) return true;
    socket.destroy();
    sha?.digest('hex');
    Promise.all([syncing, datasync(fd)]).then(() => { closeSync(fd); resolve(); }, reject);
    return false;
  } } });
  socket.on('error', reject);
  socket.write('GET ' + url.pathname + ' HTTP/1.1\\r\\nhost: ' + url.host + '\\r\\n\\r\\n');
});
const urls = ${JSON.stringify(urls)};
const t0 = performance.now();
await Promise.all(urls.map(get));
console.log('took ' + (performance.now() - t0).toFixed(1));`;
}

/** curl of the same URLs, one after another in one process (curl reuses the connection), timed from outside. */
async function curlMs(urls: string[], dir: string): Promise<number | undefined> {
  if (spawnSync('curl', ['--version']).status !== 0) return undefined;
  const argv = ['curl', '-sf'];
  for (const [i, u] of urls.entries()) argv.push(u, '-o', join(dir, `c${i}`));
  const t0 = performance.now();
  const r = await run(argv);
  const took = performance.now() - t0;
  if (r.code !== 0) throw new Error(`curl exited ${r.code}: ${r.stderr}`);
  return took;
}

/**
 * curl's CPU for the same URLs, user + system (the shell's `times` of its
 * children), in a run of its own so that curlMs's timing has no shell.
 */
async function curlCpu(urls: string[], dir: string): Promise<RoundCpu | undefined> {
  const script = `curl -sf ${urls.map((u, i) => `${JSON.stringify(u)} -o ${JSON.stringify(join(dir, `c${i}`))}`).join(' ')} || exit 1\ntimes`;
  const r = await withHubCpu(() => run(['sh', '-ec', script]));
  if (r.code !== 0) throw new Error(`curl exited ${r.code}: ${r.stderr}`);
  const client = shellChildrenCpu(r.stdout);
  return client === undefined ? undefined : { client, hub: r.hub };
}

/**
 * curl of the same URLs piped into sha256sum, one after another: the same
 * work as the pull's (the bytes fetched and hashed), timed from outside.
 */
async function curlShaMs(urls: string[]): Promise<number | undefined> {
  if (spawnSync('sha256sum', ['--version']).status !== 0) return undefined;
  const script = urls.map((u) => `curl -sf ${JSON.stringify(u)} | sha256sum >/dev/null || exit 1`).join('\n');
  const t0 = performance.now();
  const r = await run(['sh', '-ec', script]);
  const took = performance.now() - t0;
  if (r.code !== 0) throw new Error(`curl | sha256sum exited ${r.code}: ${r.stderr}`);
  return took;
}

/** `sync` of what curl wrote, timed from outside: with curlMs, a download as durable as the pull's (it syncs each blob before its rename). */
async function syncMs(): Promise<number> {
  const t0 = performance.now();
  await run(['sync']);
  return performance.now() - t0;
}

/** 14b: the store's pull beside a plain download of the same files from the same hub, unthrottled, alternated. */
export async function pullThroughput(rows: BenchRow[], notes: string[], hub: FakeHub, root: string, quick: boolean): Promise<void> {
  const rounds = quick ? 3 : 7;
  const repo = hub.repos.get(REPO) as NonNullable<ReturnType<typeof hub.repos.get>>;
  const urls = repo.files.map((f) => `${hub.url}/${REPO}/resolve/${repo.commit}/${f.path}`);
  const pulls: number[] = [];
  const setups: number[] = [];
  const plains: number[] = [];
  const synced: number[] = [];
  const curls: number[] = [];
  const curlSyncs: number[] = [];
  const curlShas: number[] = [];
  const floors: number[] = [];
  const hashedFloors: number[] = [];
  const pullCpus: RoundCpu[] = [];
  const curlCpus: RoundCpu[] = [];
  const dir = join(root, 'copy');
  const kinds = [
    async () => pulls.push(await timedChild(pullScript(hub.url, dir), setups, pullCpus)),
    async () => plains.push(await timedChild(plainScript(urls, dir, false))),
    async () => synced.push(await timedChild(plainScript(urls, dir, true))),
    async () => floors.push(await timedChild(floorScript(urls, dir, false))),
    async () => hashedFloors.push(await timedChild(floorScript(urls, dir, true))),
  ];
  for (let r = 0; r < rounds; r++) {
    // In a rotating order, and every copy removed and synced before the next, so none pays another's writeback.
    for (let k = 0; k < kinds.length; k++) {
      await (kinds[(r + k) % kinds.length] as () => Promise<number>)();
      rmSync(dir, { recursive: true, force: true });
      spawnSync('sync');
    }
    const curlDir = join(root, `curl-${r}`);
    mkdirSync(curlDir, { recursive: true });
    const c = await curlMs(urls, curlDir);
    if (c !== undefined) {
      curls.push(c);
      curlSyncs.push(c + (await syncMs()));
    }
    rmSync(curlDir, { recursive: true, force: true });
    spawnSync('sync');
    if (c !== undefined) {
      mkdirSync(curlDir, { recursive: true });
      const cpu = await curlCpu(urls, curlDir);
      if (cpu) curlCpus.push(cpu);
      rmSync(curlDir, { recursive: true, force: true });
      spawnSync('sync');
    }
    const cs = await curlShaMs(urls);
    if (cs !== undefined) curlShas.push(cs);
  }
  const total = modelBytes();
  const pull = mbps(total, median(pulls));
  const plain = mbps(total, median(plains));
  const curl = curls.length > 0 ? mbps(total, median(curls)) : undefined;
  const curlSync = curlSyncs.length > 0 ? mbps(total, median(curlSyncs)) : undefined;
  const curlSha = curlShas.length > 0 ? mbps(total, median(curlShas)) : undefined;
  const floor = mbps(total, median(floors));
  const hashedFloor = mbps(total, median(hashedFloors));
  // What the verification costs by itself: the same bytes hashed in this process.
  const content = repo.files.map((f) => f.content);
  const hashTimes: number[] = [];
  for (let i = 0; i < 3; i++) {
    const t0 = performance.now();
    // Hashed afresh: the hub's sha256 and gitBlobId remember what they computed.
    for (const [j, c] of content.entries()) createHash(repo.files[j]?.lfs ? 'sha256' : 'sha1').update(c).digest('hex');
    hashTimes.push(performance.now() - t0);
  }
  const hashMs = median(hashTimes);
  rows.push({
    figure: `14b pull throughput: the store's pull (download, sha256, rename, links, manifest) of ${(total / MiB).toFixed(0)} MiB from the fake hub, unthrottled on this host, ${rounds} rounds`,
    measured: `${pull.toFixed(0)} MB/s (${curl === undefined ? '' : `${(pull / curl).toFixed(2)}x curl, `}${curlSha === undefined ? '' : `${(pull / curlSha).toFixed(2)}x curl | sha256sum, `}${curlSync === undefined ? '' : `${(pull / curlSync).toFixed(2)}x curl + sync, `}${(pull / plain).toFixed(2)}x fetch)`,
    reference: `curl to files: ${curl?.toFixed(0) ?? '-'} MB/s; curl | sha256sum (the same fetch and hash, no write): ${curlSha?.toFixed(0) ?? '-'} MB/s; curl to files then sync (as durable as the pull): ${curlSync?.toFixed(0) ?? '-'} MB/s; Node's fetch, 4 at once, to files: ${plain.toFixed(0)} MB/s`,
    target: `>= ${PULL_BOUND}x curl`,
    met: curl !== undefined && pull / curl >= PULL_BOUND,
  });
  rows.push({
    figure: `14b the durable floor: the same ${(total / MiB).toFixed(0)} MiB read from the same hub into a buffer of a megabyte, written and datasynced every 8 MiB and at the end, all files at once, as the pull writes a blob, but without its revision look-up, lock, record, rename or hash; timed from the first connect, ${rounds} rounds beside the pull's`,
    measured: `${floor.toFixed(0)} MB/s (${curl === undefined ? '' : `${(floor / curl).toFixed(2)}x curl; `}the pull ${(pull / floor).toFixed(2)}x this floor); with each read sha256-hashed in line as the pull does: ${hashedFloor.toFixed(0)} MB/s (${curl === undefined ? '' : `${(hashedFloor / curl).toFixed(2)}x curl; `}the pull ${(pull / hashedFloor).toFixed(2)}x it)`,
    reference: `curl to files, not synced: ${curl?.toFixed(0) ?? '-'} MB/s`,
    target: `what bounds 14b here: a pull as durable as the store's cannot move faster than this floor`,
    met: undefined,
  });
  if (pullCpus.length > 0 && curlCpus.length > 0) notes.push(cpuNote(pullCpus, curlCpus, availableParallelism()));
  notes.push(
    `14b durable floor per round (ms): ${floors.map((x) => x.toFixed(0)).join(', ')}; with sha256 in line: ${hashedFloors.map((x) => x.toFixed(0)).join(', ')}`,
  );
  notes.push(
    `14b MB/s are MiB per second of the median round. Per round (ms): pull ${pulls.map((x) => x.toFixed(0)).join(', ')}; plain ${plains.map((x) => x.toFixed(0)).join(', ')}; plain with each file fsynced after (as the pull syncs each blob) ${synced.map((x) => x.toFixed(0)).join(', ')} (${mbps(total, median(synced)).toFixed(0)} MB/s)${curls.length ? `; curl, the files one after another in one process, timed from outside (its start included): ${curls.map((x) => x.toFixed(0)).join(', ')}; with a sync after: ${curlSyncs.map((x) => x.toFixed(0)).join(', ')}` : ''}${curlShas.length ? `; curl | sha256sum per file: ${curlShas.map((x) => x.toFixed(0)).join(', ')}` : ''}; load average at the end ${loadavg().map((x) => x.toFixed(1)).join(' ')}. Before its first download the pull takes ${ms(median(setups))} (median; the revision look-up, the model's lock, the store scanned for room; its first record is written beside the first downloads' connects): from its first download on it moves ${mbps(total, median(pulls) - median(setups)).toFixed(0)} MB/s, ${((mbps(total, median(pulls) - median(setups)) / plain)).toFixed(2)}x the plain fetch, a fixed cost that a model of gigabytes amortises. Verifying costs the sha256 of every byte: ${ms(hashMs)} for the ${(total / MiB).toFixed(0)} MiB in one thread here (${mbps(total, hashMs).toFixed(0)} MB/s), done on a hash thread started with the pull, from the file as each stream writes it (read in place, one stream a file); the hub runs in the bench's process, each client in its own`,
  );
}

/**
 * 14b over a gigabit link: the pull and curl of the same files through the
 * relay of 14a at 119 MiB/s, alternated. What a node's link gives is what
 * the pull must take; unthrottled on one host, both share its two cores
 * with the hub, and the figure above measures CPU rather than a link.
 */
export async function pullOverLink(rows: BenchRow[], notes: string[], hub: FakeHub, root: string, quick: boolean): Promise<void> {
  const rounds = quick ? 2 : 5;
  const link = await throttledLink(Number(new URL(hub.url).port), GIGABIT_BYTES_PER_S);
  try {
    const repo = hub.repos.get(REPO) as NonNullable<ReturnType<typeof hub.repos.get>>;
    const urls = repo.files.map((f) => `${link.url}/${REPO}/resolve/${repo.commit}/${f.path}`);
    const pulls: number[] = [];
    const curls: number[] = [];
    const dir = join(root, 'copy');
    for (let r = 0; r < rounds; r++) {
      pulls.push(await timedChild(pullScript(link.url, dir)));
      rmSync(dir, { recursive: true, force: true });
      spawnSync('sync');
      mkdirSync(dir, { recursive: true });
      const c = await curlMs(urls, dir);
      if (c === undefined) throw new Error('no curl on this machine to compare with');
      curls.push(c);
      rmSync(dir, { recursive: true, force: true });
      spawnSync('sync');
    }
    const total = modelBytes();
    const pull = mbps(total, median(pulls));
    const curl = mbps(total, median(curls));
    rows.push({
      figure: `14b over a 1 Gb/s link: the same pull beside curl, both through a relay of ${GIGABIT_BYTES_PER_S / MiB} MiB/s, ${rounds} rounds`,
      measured: `${pull.toFixed(0)} MB/s (${(pull / curl).toFixed(2)}x curl)`,
      reference: `curl: ${curl.toFixed(0)} MB/s; the link: ${(GIGABIT_BYTES_PER_S / MiB).toFixed(0)} MB/s`,
      target: `>= ${PULL_BOUND}x curl`,
      met: pull / curl >= PULL_BOUND,
    });
    notes.push(`14b over the link, per round (ms): pull ${pulls.map((x) => x.toFixed(0)).join(', ')}; curl ${curls.map((x) => x.toFixed(0)).join(', ')} (its process start included, the pull's revision look-up and manifest too)`);
  } finally {
    await link.close();
  }
}
