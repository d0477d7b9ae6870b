import { create } from '@bufbuild/protobuf';
import { type ModelPull, ModelPullSchema, ModelPullState, type PrefetchModel } from '../../gen/llmgw/v1/agent_pb.js';
import { errorMessage, usageError } from '../../lib/errors.js';
import type { Logger } from '../../lib/logger.js';
import { RateLimitedLog } from '../../lib/rate-limited-log.js';
import { includeMatcher } from '../../models/match-include.js';
import type { ModelStore } from '../../models/model-store-options.js';
import { warmModel } from '../../models/warm-model.js';
import { pullModel } from '../../models/pull-model.js';
import { checkRepoId, checkRevision } from '../../models/repo-id.js';

/** PROGRESS messages of one pull are at most this often: a fast pull of many files must not flood the stream. */
export const PULL_PROGRESS_INTERVAL_MS = 500;

/** More patterns than any real prefetch names; a control plane sending thousands is refused, not matched. */
const MAX_INCLUDE_PATTERNS = 64;
const MAX_PATTERN_LENGTH = 256;

export interface ModelPrefetchOptions {
  /** The node's store, from models.* config: the hub's endpoint and token are this, never the message's. */
  store: ModelStore | undefined;
  /** A ModelPull to the control plane. */
  send: (pull: ModelPull) => void;
  /** After every pull, done or failed: the store changed, the Inventory may have. */
  onStoreChanged: () => void;
  /** The agent's life: aborting it ends pulls (their partial files stay, resumed by the next pull). */
  signal: AbortSignal;
  logger: Logger;
  /** A pull's bytes fetched from the hub, or a warm's read from disk, and how long they took (WarmthLedger.learnRate). */
  onRate?: (kind: 'hub' | 'disk', bytes: number, ms: number) => void;
}

/**
 * PrefetchModel from the control plane: the same pull as `llmgw models
 * pull` (pull-model.ts: resumed, verified, within the budget), its input
 * checked the same way, its progress sent back as ModelPull. One download
 * per model however many ask: a repeat of a prefetch in progress joins it,
 * and any other pull of the model (another revision, `models pull` in a
 * shell) waits on the model's lock and then fetches only what is missing.
 */
export class ModelPrefetch {
  /** Pulls in progress by repo@revision and patterns, so a repeat joins rather than queues. */
  private readonly byKey = new Map<string, Promise<void>>();
  /** Pulls in progress per repo: what a start of that model waits for. */
  private readonly byRepo = new Map<string, Set<Promise<void>>>();

  private readonly refusals: RateLimitedLog;

  constructor(private readonly opts: ModelPrefetchOptions) {
    this.refusals = new RateLimitedLog(opts.logger);
  }

  /** Never throws: every outcome is a ModelPull on the stream. */
  prefetch(m: PrefetchModel): Promise<void> {
    const revision = m.revision === '' ? 'main' : m.revision;
    const fail = (error: string) => this.opts.send(create(ModelPullSchema, { repo: m.repo, revision, state: ModelPullState.FAILED, error }));
    const store = this.opts.store;
    if (store === undefined) {
      fail('this node has no model store: set models.cache_dir (and models.budget) in the agent config to accept PrefetchModel');
      return Promise.resolve();
    }
    try {
      checkPrefetch(m.repo, revision, m.include);
    } catch (err) {
      // Rate-limited, and what the control plane sent quoted short: 2000 refusals of a 100 KB repo wrote 410 MB of log (security review 3, S10).
      this.refusals.warn({ repo: quoteShort(m.repo), revision: quoteShort(revision), err: quoteShort(errorMessage(err), 300) }, 'refused a PrefetchModel');
      fail(errorMessage(err));
      return Promise.resolve();
    }
    const key = `${m.repo}@${revision}#${m.include.join('\0')}${m.pageCache ? '#warm' : ''}`;
    const joined = this.byKey.get(key);
    if (joined) return joined;
    const done = this.run(store, m.repo, revision, [...m.include], m.pageCache).finally(() => {
      this.byKey.delete(key);
      const set = this.byRepo.get(m.repo);
      set?.delete(done);
      if (set?.size === 0) this.byRepo.delete(m.repo);
      this.opts.onStoreChanged();
    });
    this.byKey.set(key, done);
    const set = this.byRepo.get(m.repo) ?? new Set();
    set.add(done);
    this.byRepo.set(m.repo, set);
    return done;
  }

  /** Resolves once every prefetch of `repo` this agent runs has ended; undefined when there is none. */
  inProgress(repo: string): Promise<void> | undefined {
    const set = this.byRepo.get(repo);
    return set && set.size > 0 ? Promise.all(set).then(() => {}) : undefined;
  }

  private async run(store: ModelStore, repo: string, revision: string, include: string[], pageCache = false): Promise<void> {
    const send = (state: ModelPullState, done: number, total: number, error = '') =>
      this.opts.send(create(ModelPullSchema, { repo, revision, state, bytesDone: BigInt(done), bytesTotal: BigInt(total), error }));
    const fileBytes = new Map<string, number>();
    let total = 0;
    let lastSentMs = 0;
    const doneBytes = () => [...fileBytes.values()].reduce((a, b) => a + b, 0);
    send(ModelPullState.STARTED, 0, 0);
    this.opts.logger.info({ repo, revision, include }, 'pulling a model the control plane asked for');
    const pullStart = performance.now();
    try {
      const r = await pullModel(
        { repo, revision, include },
        {
          ...store,
          signal: this.opts.signal,
          // The agent's loop answers probes, heartbeats and ctl: no pull may hold it for a poll's worth of reads.
          sharedLoop: true,
          onEvent: (e) => {
            if (e.kind === 'plan') total = e.fetchBytes;
            else if (e.kind === 'file-progress' || e.kind === 'file-done') fileBytes.set(e.path, e.kind === 'file-done' ? e.size : e.bytes);
            else return;
            const now = Date.now();
            if (e.kind !== 'plan' && now - lastSentMs < PULL_PROGRESS_INTERVAL_MS) return;
            lastSentMs = now;
            send(ModelPullState.PROGRESS, doneBytes(), total);
          },
        },
      );
      send(ModelPullState.DONE, r.bytes, r.bytes);
      // The hub's rate as this node sees it: what a start from the hub is modelled with (modelled-warmth.ts).
      this.opts.onRate?.('hub', r.fetchedBytes, performance.now() - pullStart);
      this.opts.logger.info({ repo, revision, commit: r.commit, bytes: r.bytes, fetched: r.fetchedBytes, evicted: r.evicted }, 'model pulled');
    } catch (err) {
      send(ModelPullState.FAILED, doneBytes(), total, errorMessage(err));
      this.opts.logger.warn({ repo, revision, err: errorMessage(err) }, 'pulling a model failed');
      return;
    }
    // Not awaited: a start of the model waits for its pull (inProgress), never for the warm.
    if (pageCache) void this.warm(store, repo, revision, send);
  }

  /** PrefetchModel.page_cache: the complete model read into the page cache (warm-model.ts), said as WARMED; a failure leaves it on disk, and says why. */
  private async warm(store: ModelStore, repo: string, revision: string, send: (state: ModelPullState, done: number, total: number, error?: string) => void): Promise<void> {
    try {
      const t0 = performance.now();
      const w = await warmModel(store.layout, repo, { signal: this.opts.signal });
      send(ModelPullState.WARMED, w.residentAfter, w.bytes);
      // Read from disk only when little of it was cached before: then it is the disk's rate.
      if (w.residentBefore < 0.1 * w.bytes) this.opts.onRate?.('disk', w.readBytes, performance.now() - t0);
      this.opts.logger.info({ repo, revision, read: w.readBytes, residentBefore: w.residentBefore, residentAfter: w.residentAfter, bytes: w.bytes }, 'model read into the page cache');
    } catch (err) {
      send(ModelPullState.WARMED, 0, 0, `complete on disk, not read into the page cache: ${errorMessage(err)}`);
      this.opts.logger.warn({ repo, revision, err: errorMessage(err) }, 'reading a model into the page cache failed');
    }
  }
}

/** What `llmgw models pull` checks, plus bounds on the patterns a control plane may send; throws the one-line reason. */
export function checkPrefetch(repo: string, revision: string, include: readonly string[]): void {
  checkRepoId(repo);
  checkRevision(revision);
  if (include.length > MAX_INCLUDE_PATTERNS) throw usageError(`${include.length} include patterns; at most ${MAX_INCLUDE_PATTERNS}`);
  const long = include.find((p) => p.length > MAX_PATTERN_LENGTH);
  if (long !== undefined) throw usageError(`include pattern ${JSON.stringify(long.slice(0, 40))}… is longer than ${MAX_PATTERN_LENGTH} characters`);
  includeMatcher(include);
}

/** At most `max` characters of what the control plane sent, for a log line. */
function quoteShort(text: string, max = 80): string {
  return text.length > max ? `${text.slice(0, max - 3)}...` : text;
}
