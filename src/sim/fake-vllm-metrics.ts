/**
 * The vLLM double's metrics: its token and request counters, counted when
 * vLLM counts them, and the text of GET /metrics. The engine (fake-vllm.ts)
 * calls these from its scheduler's hooks.
 */
import type { FakeBatchScheduler, FinishReason, SchedRequest } from './fake-batch-scheduler.js';
import type { FakeVllmOptions } from './fake-vllm-args.js';
import type { FakeVllmSleep } from './fake-vllm-sleep.js';

interface Counters {
  promptTokens: number;
  generationTokens: number;
  success: Record<FinishReason, number>;
}

export class FakeVllmMetrics {
  readonly #o: Pick<FakeVllmOptions, 'logStats'>;
  readonly #servedName: string;
  readonly #startedS: number;
  readonly #scheduler: FakeBatchScheduler;
  readonly #counters: Counters = { promptTokens: 0, generationTokens: 0, success: { length: 0, stop: 0 } };

  constructor(o: Pick<FakeVllmOptions, 'logStats'>, servedName: string, startedS: number, scheduler: FakeBatchScheduler) {
    this.#o = o;
    this.#servedName = servedName;
    this.#startedS = startedS;
    this.#scheduler = scheduler;
  }

  // Prompt tokens count when a request's prefill completes (V:vllm/v1/metrics/stats.py:386-391);
  // for a pooling request that is when it finishes.
  prefill(r: SchedRequest): void {
    this.#counters.promptTokens += r.promptTokens;
  }

  // Generation tokens per engine step (V:vllm/v1/metrics/loggers.py:1194, 1202-1204).
  token(): void {
    this.#counters.generationTokens++;
  }

  finish(r: SchedRequest): void {
    this.#counters.success[r.finishReason]++;
  }

  /**
   * V:vllm/v1/metrics/loggers.py: labels model_name and engine (:468-474),
   * running and waiting gauges (:493-511), token counters (:671, 705),
   * none of them with --disable-log-stats (V:vllm/v1/engine/async_llm.py:127, 160).
   */
  text(sleepMode: FakeVllmSleep | undefined): string {
    const o = this.#o;
    const counters = this.#counters;
    const scheduler = this.#scheduler;
    const proc = '# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n# TYPE process_start_time_seconds gauge\n' + `process_start_time_seconds ${this.#startedS}.0\n`;
    if (!o.logStats) return proc;
    const label = `engine="0",model_name="${this.#servedName}"`;
    const one = (type: 'gauge' | 'counter', name: string, help: string, value: number) =>
      `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n${name}{${label}} ${value.toFixed(1)}\n`;
    const success = `# HELP vllm:request_success_total Count of successfully processed requests.\n# TYPE vllm:request_success_total counter\n${(['length', 'stop'] as const).map((r) => `vllm:request_success_total{${label},finished_reason="${r}"} ${counters.success[r].toFixed(1)}\n`).join('')}`;
    return (
      proc +
      one('gauge', 'vllm:num_requests_running', 'Number of requests in model execution batches.', scheduler.running()) +
      one('gauge', 'vllm:num_requests_waiting', 'Number of requests waiting to be processed.', scheduler.waiting()) +
      one('gauge', 'vllm:kv_cache_usage_perc', 'KV-cache usage. 1 means 100 percent usage.', Math.min(1, scheduler.running() * 0.01)) +
      one('counter', 'vllm:prompt_tokens_total', 'Number of prefill tokens processed.', counters.promptTokens) +
      one('counter', 'vllm:generation_tokens_total', 'Number of generation tokens processed.', counters.generationTokens) +
      success +
      (sleepMode?.metricsText(label) ?? '')
    );
  }
}
