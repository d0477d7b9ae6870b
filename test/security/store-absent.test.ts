import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, lchownSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { assertTrustedDirectory, makeTrustedDirectory } from '../../src/lib/files/check-directory-trust.js';
import { LlmgwError } from '../../src/lib/errors.js';
import { BandwidthLimiter } from '../../src/models/bandwidth-limiter.js';
import { ConcurrencyLimit } from '../../src/models/concurrency-limit.js';
import { type PullContext, pullModel } from '../../src/models/pull-model.js';
import { assertTrustedStore } from '../../src/models/store-trust.js';
import { StoreLayout } from '../../src/models/store-layout.js';
import { FakeHub, fakeRepo, gitBlobId } from '../models/fake-hub.js';

/*
 * Security review 4, F3: a store (or state folder) path that a local user
 * can own after the check. A: cache_dir did not exist yet, under a sticky
 * 1777 folder; the user made it, planted blobs/<etag>.incomplete as a link
 * into a root-only folder, and root's next pull wrote the hub's bytes there
 * (a cron line). B: cache_dir was a root link in a folder a group may
 * write; a member re-pointed it. The local user here is a real uid (65533,
 * no group), planting as itself; the agent's side runs as root.
 */

const OTHER = 65533;
const USERS_GID = 100;
const asRoot = process.geteuid?.() === 0;
const PAYLOAD = Buffer.from("* * * * * root /bin/sh -c 'id > /tmp/pwned'\n");
const ETAG = gitBlobId(PAYLOAD);

const hub = new FakeHub();
hub.repos.set('evil/payload', fakeRepo('evil/payload', [{ path: 'crontab.txt', content: PAYLOAD, lfs: false }]));

/** Runs `sh -c script` as uid 65533 (any local user). */
function asOther(script: string): void {
  const r = spawnSync('/bin/sh', ['-c', script], { uid: OTHER, gid: OTHER, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`as uid ${OTHER}: ${script}: ${r.stderr}`);
}

let root: string;
let scratch: string;
let privateRoot: string;
beforeAll(() => hub.start());
afterAll(() => hub.stop());
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'llmgw-f3-'));
  chmodSync(root, 0o755);
  scratch = join(root, 'scratch'); // a scratch disk mounted for users: root's, 1777
  mkdirSync(scratch);
  chmodSync(scratch, 0o1777);
  privateRoot = join(root, 'private-root'); // /etc/cron.d, as far as the attacker is concerned
  mkdirSync(privateRoot, { mode: 0o700 });
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

function ctx(layout: StoreLayout): PullContext {
  return {
    layout,
    hub: { endpoint: hub.url, tokenFile: '' },
    budget: 10_000_000,
    concurrency: new ConcurrencyLimit(2),
    limiter: new BandwidthLimiter(undefined),
    signal: AbortSignal.timeout(20_000),
  };
}

function refusal(check: () => unknown): LlmgwError {
  try {
    check();
  } catch (err) {
    if (err instanceof LlmgwError) return err;
    throw err;
  }
  throw new Error('not refused');
}

async function pullRefusal(layout: StoreLayout): Promise<string> {
  try {
    await pullModel({ repo: 'evil/payload', revision: 'main', include: [] }, ctx(layout));
  } catch (err) {
    return (err as Error).message;
  }
  throw new Error('the pull was not refused');
}

describe.skipIf(!asRoot)('F3: no store, state or log folder another user can own after the check (run as root, the local user as uid 65533)', () => {
  it('A: a cache_dir not there yet under a sticky folder is made by the agent at its start, root\'s and 0755; one a local user made first is refused', () => {
    const cache = join(scratch, 'llmgw-models');
    // --print-config only judges: nothing is made, and the sticky root parent is no reason to refuse.
    expect(() => assertTrustedStore(cache)).not.toThrow();
    expect(existsSync(cache)).toBe(false);
    // The start makes it.
    assertTrustedStore(cache, undefined, 0o755);
    const st = lstatSync(cache);
    expect([st.isDirectory(), st.uid, st.mode & 0o777]).toEqual([true, 0, 0o755]);
    // A local user who came first owns the name: refused at the start, naming the owner, one line.
    const taken = join(scratch, 'taken');
    asOther(`mkdir ${taken}`);
    const err = refusal(() => assertTrustedStore(taken, undefined, 0o755));
    expect(err.kind).toBe('config');
    expect(err.message).toBe(`models.cache_dir: directory ${taken} is owned by uid ${OTHER}, not root (chown root ${taken}); only root may write there, or choose another models.cache_dir`);
  });

  it('A at the pull: a store a local user made (after the start, or after a cleaner removed it) is refused, and the planted .incomplete link is never written through', async () => {
    const cache = join(scratch, 'llmgw-models');
    const blobs = join(cache, 'hub', 'models--evil--payload', 'blobs');
    asOther(`mkdir -p ${blobs} && ln -s ${privateRoot}/cron-made-by-root ${blobs}/${ETAG}.incomplete`);
    const message = await pullRefusal(new StoreLayout(cache));
    expect(message).toBe(`models.cache_dir: directory ${cache} is owned by uid ${OTHER}, not root (chown root ${cache}); only root may write there, or choose another models.cache_dir`);
    expect(readdirSync(privateRoot)).toEqual([]);
  });

  it('a planted <sha>.incomplete link is refused with one line even in a root store (O_NOFOLLOW), and the root-only folder stays empty', async () => {
    const cache = join(root, 'store');
    const layout = new StoreLayout(cache);
    const blobs = join(cache, 'hub', 'models--evil--payload', 'blobs');
    mkdirSync(blobs, { recursive: true, mode: 0o755 });
    symlinkSync(join(privateRoot, 'cron-made-by-root'), join(blobs, `${ETAG}.incomplete`));
    const message = await pullRefusal(layout);
    expect(message).toBe(
      `models.cache_dir: ${join(blobs, `${ETAG}.incomplete`)} is a symbolic link; refused, the store holds only what root made (security review 4, F3): remove it (sudo rm -rf ${join(blobs, `${ETAG}.incomplete`)}) and pull again`,
    );
    expect(message.split('\n')).toHaveLength(1);
    expect(readdirSync(privateRoot)).toEqual([]);
    // A folder of the store another user owns is refused where the pull would write in it.
    rmSync(join(blobs, `${ETAG}.incomplete`));
    chownSync(blobs, OTHER, OTHER);
    expect(await pullRefusal(layout)).toMatch(new RegExp(`^models\\.cache_dir: ${blobs} is owned by uid ${OTHER}; refused`));
    // Once it is root's again, the same pull goes through: the checks refuse the plant, not the store.
    chownSync(blobs, 0, 0);
    const r = await pullModel({ repo: 'evil/payload', revision: 'main', include: [] }, ctx(layout));
    expect(r.fetchedBytes).toBe(PAYLOAD.length);
  });

  it('B: a root link to a root store, in a folder its group may write, is refused at the check and at the pull; the member\'s re-pointing never reached', async () => {
    const grpw = join(root, 'grpw');
    mkdirSync(grpw);
    chownSync(grpw, 0, USERS_GID);
    chmodSync(grpw, 0o775);
    const real = join(root, 'real-store');
    mkdirSync(real, { mode: 0o755 });
    const cache = join(grpw, 'llmgw-models');
    symlinkSync(real, cache);
    const expected = `models.cache_dir: directory ${grpw} is writable by group or others (mode 0775; chmod go-w ${grpw}); only root may write there, or choose another models.cache_dir`;
    expect(refusal(() => assertTrustedStore(cache)).message).toBe(expected);
    expect(await pullRefusal(new StoreLayout(cache))).toBe(expected);
  });

  it('a link on the way that another user owns is refused even in a sticky root folder (systemd\'s unsafe transition); root\'s own link there is followed and judged', () => {
    const theirs = join(scratch, 'theirs');
    asOther(`ln -s ${root} ${theirs}`);
    expect(refusal(() => assertTrustedDirectory(join(theirs, 'state'), 'supervisor.state_dir')).message).toBe(
      `supervisor.state_dir: ${theirs} is a symbolic link owned by uid ${OTHER}, who may point it anywhere; only root may own links on the way, or choose another supervisor.state_dir`,
    );
    // The look-alike: /var/run -> /run, root's link in a root folder, to a root folder.
    const run = join(root, 'run');
    mkdirSync(run, { mode: 0o755 });
    symlinkSync(run, join(root, 'var-run'));
    makeTrustedDirectory(join(root, 'var-run', 'llmgw'), 'supervisor.state_dir', 0o700);
    const st = lstatSync(join(run, 'llmgw'));
    expect([st.isDirectory(), st.uid, st.mode & 0o777]).toEqual([true, 0, 0o700]);
    // Root's link in the sticky folder passes too (others cannot rename or remove it).
    const mine = join(scratch, 'mine');
    symlinkSync(run, mine);
    expect(() => assertTrustedDirectory(join(mine, 'llmgw'), 'supervisor.state_dir')).not.toThrow();
    // Whatever the link's target is, it is judged: a link to a folder the local user owns is refused.
    lchownSync(mine, 0, 0);
    asOther(`mkdir ${scratch}/their-dir`);
    rmSync(mine);
    symlinkSync(join(scratch, 'their-dir'), mine);
    expect(refusal(() => assertTrustedDirectory(mine, 'supervisor.state_dir')).message).toMatch(`directory ${join(scratch, 'their-dir')} is owned by uid ${OTHER}`);
  });

  it('the state folder is judged again where a state file is written, not only at the start', async () => {
    const { writeStateFile } = await import('../../src/lib/files/state-file.js');
    const { sampleStateFile } = await import('../helpers/sample-state-file.js');
    const state = join(root, 'state');
    mkdirSync(state, { mode: 0o700 });
    await writeStateFile(join(state, 's1.json'), sampleStateFile());
    chmodSync(state, 0o777);
    await expect(writeStateFile(join(state, 's2.json'), sampleStateFile())).rejects.toThrow(`supervisor.state_dir: directory ${state} is writable by group or others (mode 0777`);
    expect(existsSync(join(state, 's2.json'))).toBe(false);
  });
});
