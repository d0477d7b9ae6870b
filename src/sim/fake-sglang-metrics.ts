/**
 * The SGLang double's metrics: the scheduler's gauges as /metrics last
 * published them, the token and request counters, the text of GET /metrics
 * (with --enable-metrics) and the answer of GET /v1/loads. The server
 * (fake-sglang.ts) calls these from its scheduler's hooks.
 */
import type { FakeBatchScheduler, SchedRequest } from './fake-batch-scheduler.js';
import { DEFAULT_SGLANG_VERSION, type FakeSglangOptions } from './fake-sglang-args.js';

/** An idle scheduler republishes its gauges at least this often (metrics_reporter.py:1154-1175). */
export const IDLE_METRICS_MS = 30_000;

type MetricsOptions = Pick<FakeSglangOptions, 'servedName' | 'pp' | 'priorityScheduling' | 'decodeLogInterval'>;

export class FakeSglangMetrics {
  readonly #o: MetricsOptions;
  readonly #scheduler: FakeBatchScheduler;
  readonly #counters = { prompt: { true: 0, false: 0 }, generation: { true: 0, false: 0 }, requests: 0 };
  readonly #realtime = { prefill_compute: 0, prefill_cache: 0, decode: 0 };
  /**
   * The scheduler's gauges as /metrics last published them (self.stats,
   * written by metrics_collector.log_stats). They are not read live: they
   * are written at each prefill batch, with the running batch as it was
   * before the new requests joined it (metrics_reporter.py:666-679, from
   * PrefillStats.from_adder(adder, running_batch.reqs), scheduler.py:3418-3421);
   * every --decode-log-interval decode steps (metrics_reporter.py:750-764,
   * 886-897; the step count, batch_result_processor.py:909-911); and when
   * the scheduler idles with a gauge that disagrees with its empty batch,
   * or 30 s after the last write (metrics_reporter.py:1154-1210,
   * scheduler.py:4069). So a request that decodes fewer steps than the
   * interval, alone, never shows in num_running_reqs.
   */
  readonly #gauges = { running: [] as SchedRequest[], waiting: [] as SchedRequest[], at: 0 };
  /** Requests past their prefill: the decode batch (running_batch.reqs). */
  readonly #decoding = new Set<SchedRequest>();
  /** forward_ct_decode: decode steps of the batch since start. */
  #decodeSteps = 0;

  constructor(o: MetricsOptions, scheduler: FakeBatchScheduler) {
    this.#o = o;
    this.#scheduler = scheduler;
  }

  #publishGauges(running: SchedRequest[]): void {
    this.#gauges.running = running;
    this.#gauges.waiting = this.#scheduler.snapshot().waiting;
    this.#gauges.at = Date.now();
  }

  /** The idle scheduler's timer: it writes its gauges at least every 30 s (metrics_reporter.py:1169-1175). */
  idleTick(): void {
    if (this.#scheduler.running(false) === 0 && Date.now() - this.#gauges.at >= IDLE_METRICS_MS) this.#publishGauges([]);
  }

  /** A request's prefill, `hit` of its prompt tokens served from the prefix cache. */
  prefill(r: SchedRequest, hit: number): void {
    // On each prefill batch, the computed and the cached prompt tokens apart
    // (S:python/sglang/srt/managers/scheduler_components/metrics_reporter.py:628-636). The
    // scheduler counts every request it runs, its own health checks too: their
    // log_metrics=False reaches only the tokenizer's counters (http_server.py:689-697;
    // tokenizer_manager.py:2496).
    this.#realtime.prefill_compute += r.promptTokens - hit;
    this.#realtime.prefill_cache += hit;
    this.#publishGauges([...this.#decoding]);
    if (!r.pooling && r.maxTokens > 1) this.#decoding.add(r);
  }

  token(r: SchedRequest, i: number): void {
    // The first token comes out of the prefill; every later one is a decode step
    // (metrics_reporter.py:726-733).
    if (i === 0) return;
    this.#realtime.decode++;
    // One step of the batch per step of its oldest request: each request steps on its own timer here.
    if (this.#decoding.values().next().value !== r) return;
    this.#decodeSteps++;
    if (this.#decodeSteps % this.#o.decodeLogInterval === 0) this.#publishGauges([...this.#decoding]);
  }

  // Once per finished request, by its whole count
  // (S:python/sglang/srt/observability/metrics_collector.py:1740-1757; tokenizer_manager.py:2908).
  finish(r: SchedRequest): void {
    this.#decoding.delete(r);
    if (r.internal) return;
    const s = r.streaming === true ? 'true' : 'false';
    this.#counters.prompt[s] += r.promptTokens;
    this.#counters.generation[s] += r.maxTokens;
    this.#counters.requests++;
  }

  changed(): void {
    // A request dropped or aborted leaves the batch; an idle scheduler corrects a stale gauge at once.
    const { running } = this.#scheduler.snapshot();
    for (const r of this.#decoding) if (!running.includes(r)) this.#decoding.delete(r);
    if (running.length === 0 && this.#gauges.running.length > 0) this.#publishGauges([]);
  }

  /**
   * GET /v1/loads: one entry per DP rank (one here) with running and waiting
   * counts (S:python/sglang/srt/entrypoints/v1_loads.py:61-93). The field
   * set beyond those two follows the shape public clients read; the double
   * cannot vouch for each.
   */
  loads() {
    const running = this.#scheduler.running();
    const waiting = this.#scheduler.waiting();
    const one = { dp_rank: 0, num_running_reqs: running, num_waiting_reqs: waiting, num_total_reqs: running + waiting, num_used_tokens: 0, max_total_num_tokens: 1_000_000, token_usage: 0, gen_throughput: 0, cache_hit_rate: 0, utilization: 0 };
    return { timestamp: new Date().toISOString(), version: DEFAULT_SGLANG_VERSION, dp_rank_count: 1, loads: [one], aggregate: { total_running_reqs: running, total_waiting_reqs: waiting, total_reqs: running + waiting } };
  }

  /**
   * Labels model_name, engine_type, tp_rank, pp_rank, moe_ep_rank
   * (S:python/sglang/srt/observability/metrics_collector.py:1080-1108); each
   * PP stage exports its own running/queue series. With priority scheduling
   * the gauges are written under priority="" (the total) and once per
   * priority (metrics_collector.py:1131-1143).
   */
  text(): string {
    const o = this.#o;
    const counters = this.#counters;
    const realtime = this.#realtime;
    const base = (pp: number) => `model_name="${o.servedName}",engine_type="unified",tp_rank="0",pp_rank="${pp}",moe_ep_rank="0"`;
    const head = (type: string, name: string, help: string) => `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n`;
    const { running, waiting } = this.#gauges;
    const gauge = (name: string, help: string, reqs: SchedRequest[]) => {
      const counted = reqs.filter((r) => !r.internal);
      let text = head('gauge', name, help);
      for (let pp = 0; pp < o.pp; pp++) {
        if (!o.priorityScheduling) {
          text += `${name}{${base(pp)}} ${counted.length.toFixed(1)}\n`;
          continue;
        }
        text += `${name}{${base(pp)},priority=""} ${counted.length.toFixed(1)}\n`;
        const byPriority = new Map<number, number>();
        for (const r of counted) byPriority.set(r.priority ?? 0, (byPriority.get(r.priority ?? 0) ?? 0) + 1);
        for (const [p, n] of byPriority) text += `${name}{${base(pp)},priority="${p}"} ${n.toFixed(1)}\n`;
      }
      return text;
    };
    const counter = (name: string, help: string, v: { true: number; false: number }) =>
      head('counter', name, help) +
      `${name}{${base(0)},is_streaming="false"} ${v.false.toFixed(1)}\n${name}{${base(0)},is_streaming="true"} ${v.true.toFixed(1)}\n`;
    return (
      gauge('sglang:num_running_reqs', 'The number of running requests.', running) +
      gauge('sglang:num_queue_reqs', 'The number of requests in the waiting queue.', waiting) +
      head('gauge', 'sglang:token_usage', 'The token usage.') +
      `sglang:token_usage{${base(0)}} ${Math.min(1, running.length * 0.01).toFixed(2)}\n` +
      counter('sglang:prompt_tokens_total', 'Number of prefill tokens processed.', counters.prompt) +
      counter('sglang:generation_tokens_total', 'Number of generation tokens processed.', counters.generation) +
      head('counter', 'sglang:num_requests_total', 'Number of requests processed.') +
      `sglang:num_requests_total{${base(0)}} ${counters.requests.toFixed(1)}\n` +
      head('counter', 'sglang:realtime_tokens_total', 'Total number of tokens processed (updated on each log interval). mode: prefill_compute, prefill_cache, decode.') +
      // A mode's series exists from its first increment: a zero delta is skipped (metrics_collector.py:1243-1257).
      (['prefill_compute', 'prefill_cache', 'decode'] as const)
        .filter((m) => realtime[m] > 0)
        .map((m) => `sglang:realtime_tokens_total{${base(0)},mode="${m}"} ${realtime[m].toFixed(1)}\n`)
        .join('')
    );
  }
}
