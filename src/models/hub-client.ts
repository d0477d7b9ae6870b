import { readFile } from 'node:fs/promises';
import { describeErrno } from '../lib/errno.js';
import { configError, failure } from '../lib/errors.js';
import { deadlineSignal } from '../lib/deadline.js';
import { COMMIT_HASH } from './repo-id.js';
import { type SmallAnswer, getSmall } from './small-get.js';

/** A revision's description: the largest real repos' are a few hundred KiB. */
export const MAX_REVISION_BYTES = 16 * 1024 * 1024;
/** The hub's answer to a revision, all of it. */
export const REVISION_TIMEOUT_MS = 60_000;

/** A file of a revision, checked: its path is safe to create under a snapshot. */
export interface HubFile {
  path: string;
  size: number;
  /** Git blob sha1 (40 hex): the blob name of a small file. */
  blobId: string;
  /** LFS content sha256 (64 hex), for LFS files. */
  sha256?: string;
}

export interface HubRevision {
  commit: string;
  files: HubFile[];
}

export interface HubOptions {
  /** Base URL, e.g. https://huggingface.co (models.hub.endpoint). */
  endpoint: string;
  /** models.hub.token_file; read at each pull so a rotated token needs no restart. */
  tokenFile: string;
  /** models.hub.redirect_hosts as a list: the private hosts a redirect of a download may reach (redirect-policy.ts). */
  redirectHosts?: readonly string[];
}

/** Authorization headers for the hub, the token read from its file. */
export async function hubHeaders(options: HubOptions): Promise<Record<string, string>> {
  if (options.tokenFile === '') return {};
  let token: string;
  try {
    token = (await readFile(options.tokenFile, 'utf8')).trim();
  } catch (err) {
    throw configError(`models.hub.token_file: cannot read ${options.tokenFile}: ${describeErrno(err)}`, { cause: err });
  }
  if (token === '' || /\s/.test(token)) throw configError(`models.hub.token_file ${options.tokenFile} does not hold one token`);
  return { authorization: `Bearer ${token}` };
}

function base(endpoint: string): string {
  return endpoint.replace(/\/+$/, '');
}

/** GET /{repo}/resolve/{commit}/{file}: the hub answers with the bytes, or a redirect to its CDN for LFS files. */
export function resolveUrl(endpoint: string, repo: string, commit: string, file: string): string {
  return `${base(endpoint)}/${repo}/resolve/${commit}/${file.split('/').map(encodeURIComponent).join('/')}`;
}

/**
 * The commit a revision is at and its files, from
 * `GET /api/models/{repo}/revision/{revision}?blobs=true` (huggingface_hub's
 * model_info with files_metadata=True): `sha`, and per sibling `rfilename`,
 * `size`, `blobId` and, for LFS files, `lfs.sha256`. Everything the hub says
 * is checked before it names a file here.
 */
export async function fetchRevision(
  options: HubOptions,
  repo: string,
  revision: string,
  signal?: AbortSignal,
  limits: { timeoutMs: number; maxBytes: number } = { timeoutMs: REVISION_TIMEOUT_MS, maxBytes: MAX_REVISION_BYTES },
): Promise<HubRevision> {
  const url = `${base(options.endpoint)}/api/models/${repo}/revision/${encodeURIComponent(revision)}?blobs=true`;
  // Outside the try: a token file that cannot be read is the node's config, not the hub being unreachable.
  const headers = { ...(await hubHeaders(options)), 'accept-encoding': 'identity' };
  // A hub that answers slowly or never is not waited on for ever (security review 3, S4).
  const deadline = deadlineSignal(limits.timeoutMs, ...(signal ? [signal] : []));
  try {
    return await fetchRevisionWithin(options, url, headers, repo, revision, deadline.signal, signal, limits.maxBytes);
  } catch (err) {
    if (deadline.expired) throw failure(`the hub at ${options.endpoint} did not describe ${repo}@${revision} within ${limits.timeoutMs / 1000}s; try again later`);
    throw err;
  } finally {
    deadline.clear();
  }
}

async function fetchRevisionWithin(options: HubOptions, url: string, headers: Record<string, string>, repo: string, revision: string, signal: AbortSignal, outer: AbortSignal | undefined, maxBytes: number): Promise<HubRevision> {
  let res: SmallAnswer;
  let at = new URL(url);
  for (let hops = 0; ; hops++) {
    try {
      // Redirects only within the hub (a renamed repo): the revision is the hub's own to describe, never a host it points at.
      res = await getSmall(at, headers, signal);
    } catch (err) {
      if (outer?.aborted || signal.aborted) throw err;
      throw failure(`cannot reach the hub at ${options.endpoint}: ${describeFetchError(err)}; check models.hub.endpoint and this node's network (DNS, proxy, firewall), then pull again`, { cause: err });
    }
    const location = res.location;
    if (res.status < 300 || res.status > 399 || location === undefined) break;
    res.cancel();
    const next = new URL(location, at);
    if (next.origin !== at.origin) throw failure(`the hub redirected the description of ${repo}@${revision} to another host (${quoteHub(next.origin)}); only its own addresses are followed`);
    if (hops >= 5) throw failure(`the hub redirected the description of ${repo}@${revision} more than 5 times`);
    at = next;
  }
  if (res.status === 401 || res.status === 403) {
    res.cancel();
    throw failure(`the hub refused ${repo}@${revision} (HTTP ${res.status}): set models.hub.token_file to a token that may read it`);
  }
  if (res.status === 404) {
    res.cancel();
    throw failure(`the hub has no model ${repo} at revision ${revision} (HTTP 404)`);
  }
  if (res.status < 200 || res.status > 299) {
    res.cancel();
    throw failure(`the hub answered HTTP ${res.status} for ${repo}@${revision}; try again later`);
  }
  let text: string | undefined;
  try {
    text = await res.text(maxBytes);
  } catch (err) {
    if (outer?.aborted || signal.aborted) throw err;
    throw failure(`cannot read the hub's description of ${repo}@${revision} from ${options.endpoint}: ${describeFetchError(err)}`, { cause: err });
  }
  if (text === undefined) throw failure(`the hub's description of ${repo}@${revision} is over ${(maxBytes / 1024 / 1024).toFixed(0)} MiB; no model's is`);
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  return checkRevisionBody(body, repo, revision);
}

/** What a hub said, quoted for an error: at most 80 characters (a 6 MB file name became a ModelPull no control plane accepts). */
function quoteHub(v: unknown): string {
  const text = JSON.stringify(v) ?? String(v);
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}

function checkRevisionBody(body: unknown, repo: string, revision: string): HubRevision {
  const bad = (what: string) => failure(`the hub's description of ${repo}@${revision} is not usable: ${what}`);
  if (typeof body !== 'object' || body === null) throw bad('not a JSON object');
  const { sha, siblings } = body as { sha?: unknown; siblings?: unknown };
  if (typeof sha !== 'string' || !COMMIT_HASH.test(sha)) throw bad('no 40-digit commit sha');
  if (!Array.isArray(siblings)) throw bad('no siblings list');
  const files = siblings.map((s: unknown): HubFile => {
    const { rfilename, size, blobId, lfs } = (s ?? {}) as { rfilename?: unknown; size?: unknown; blobId?: unknown; lfs?: unknown };
    if (typeof rfilename !== 'string' || !isSafeRepoPath(rfilename)) throw bad(`file name ${quoteHub(rfilename)} is not a plain relative path`);
    if (typeof blobId !== 'string' || !COMMIT_HASH.test(blobId)) throw bad(`${quoteHub(rfilename)} has no blobId (is ?blobs=true supported by this endpoint?)`);
    const sha256 = (lfs as { sha256?: unknown } | undefined)?.sha256;
    if (lfs !== undefined && lfs !== null && (typeof sha256 !== 'string' || !/^[0-9a-f]{64}$/.test(sha256))) throw bad(`${rfilename} has no lfs.sha256`);
    const n = lfs ? (lfs as { size?: unknown }).size ?? size : size;
    if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 0) throw bad(`${rfilename} has no size`);
    return { path: rfilename, size: n, blobId, ...(typeof sha256 === 'string' ? { sha256 } : {}) };
  });
  return { commit: sha, files };
}

/** A path that stays inside a snapshot folder: relative, `/`-separated, no empty, `.` or `..` segment. */
export function isSafeRepoPath(path: string): boolean {
  if (path === '' || path.length > 1024 || path.includes('\\') || path.includes('\0')) return false;
  return path.split('/').every((seg) => seg !== '' && seg !== '.' && seg !== '..');
}

export function describeFetchError(err: unknown): string {
  const cause = (err as { cause?: { code?: string; message?: string } })?.cause;
  return cause?.code ?? cause?.message ?? (err instanceof Error ? err.message : String(err));
}
