import { type CompileDirs, type EngineCacheSurvey, type SurveyLimits, SURVEY_LIMITS, surveyEngineCaches } from './engine-cache-survey.js';
import { modelCacheKey, safeName, type StoreLayout } from './store-layout.js';

/** How old the last survey may be when a report asks whether a compile cache exists before one more is started (in the background). */
export const SURVEY_MAX_AGE_MS = 30_000;

/**
 * The last survey of the engines' caches (engine-cache-survey.ts), for the
 * agent's reports: Inventory's warmth, `ctl status`, /metrics and every
 * launch ask whether a model has a compile cache, many times a second
 * under a scrape loop. They read the last survey and never wait for one;
 * one stale by SURVEY_MAX_AGE_MS starts the next in the background, one at a
 * time. Before, each of them read the engine accounts' folders
 * synchronously on the event loop, through the accounts' links: 400,000
 * links held it 34 s per /metrics scrape (security review 4, F2).
 */
export class EngineCacheWatch {
  #last: EngineCacheSurvey | undefined;
  #running: Promise<EngineCacheSurvey> | undefined;
  /** Surveys run (for tests: the hot paths start at most one per SURVEY_MAX_AGE_MS). */
  surveys = 0;

  constructor(
    readonly layout: StoreLayout,
    private readonly opts: {
      maxAgeMs?: number;
      limits?: SurveyLimits;
      onSurvey?: (s: EngineCacheSurvey) => void;
      /** Each engine's compile folders (the agent's engine catalog); none: nothing counts as compiled. */
      compileDirs?: CompileDirs;
    } = {},
  ) {}

  /** The last survey, without waiting; none before the first ended. */
  get last(): EngineCacheSurvey | undefined {
    return this.#last;
  }

  /** A survey now (or the one running): for the store's rescans and pulls, off the reports' path. */
  refresh(): Promise<EngineCacheSurvey> {
    this.#running ??= (async () => {
      try {
        this.surveys++;
        const s = await surveyEngineCaches(this.layout, this.opts.limits ?? SURVEY_LIMITS, this.opts.compileDirs);
        this.#last = s;
        this.opts.onSurvey?.(s);
        return s;
      } finally {
        this.#running = undefined;
      }
    })();
    return this.#running;
  }

  /**
   * Whether the last survey saw a compile cache for `model` run by `engine`
   * (issue 41's "complete on local disk with a compile cache"), under any
   * account. Never waits, never reads a folder; a stale survey starts the next.
   */
  /** The compile-cache folders (COMPILE_CACHE_FILES) the last survey saw under `uid`'s cache for `engine` and `model`, relative to it. */
  cacheDirs(uid: number, engine: string, model: string): { dir: string; mtimeMs: number }[] {
    const s = this.#last;
    if (this.#running === undefined && (s === undefined || Date.now() - s.atMs > (this.opts.maxAgeMs ?? SURVEY_MAX_AGE_MS))) void this.refresh().catch(() => {});
    const leaf = modelCacheKey(model);
    const eng = safeName(engine);
    return s?.leaves.find((l) => l.uid === uid && l.leaf === leaf && l.engine === eng)?.cacheDirs ?? [];
  }

  compiled(model: string, engine: string): boolean {
    const s = this.#last;
    if (this.#running === undefined && (s === undefined || Date.now() - s.atMs > (this.opts.maxAgeMs ?? SURVEY_MAX_AGE_MS))) void this.refresh().catch(() => {});
    if (s === undefined) return false;
    const leaf = modelCacheKey(model);
    const eng = safeName(engine);
    return s.leaves.some((l) => l.compiled && l.leaf === leaf && l.engine === eng);
  }
}
