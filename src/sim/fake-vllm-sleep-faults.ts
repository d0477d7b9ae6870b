/**
 * What vLLM's sleep does to the engines that cannot survive it (issue 47
 * item 8, review engine-fidelity-3 §3 D1, D2), for the double's sleep mode
 * (fake-vllm-sleep.ts): the partial wake before #44483, the loaders without a
 * reload, the draft a reload never brings back, and the checkpoint a reload
 * reads from disk.
 */
import { vllmLog } from './engine-log.js';
import { versionBefore } from './sim-knobs.js';

/**
 * The first release carrying vLLM #44483 (commit 93ec6458, merged 2026-06-24;
 * cherry-picked to the v0.24.0 release branch as 6ed56e04ff). Before it
 * `EngineCore.wake_up` ended with `# Resume scheduling (applies to all levels)
 * self.resume_scheduler()` for partial wakes too, and `DPEngineCoreProc` ran
 * `execute_dummy_batch()` while asleep (the diff of 93ec6458 to
 * V:vllm/v1/engine/core.py; from it core.py:917-921 resumes only when
 * `not self.model_executor.is_sleeping`). Issue #44395 was reported on 0.22.0.
 */
export const PARTIAL_WAKE_FIXED_IN = '0.24.0';

/** How often an idle DP rank of a vLLM before #44483 runs its dummy batch (its busy loop's poll, inferred). */
export const DP_DUMMY_BATCH_MS = 100;

/** What a forward on unmapped cumem pages raises (vLLM #44395): sticky, the engine is dead. */
export const ILLEGAL_ACCESS = 'RuntimeError: CUDA error: an illegal memory access was encountered';

/** Whether vLLM `version` resumes its scheduler after a partial wake, and runs DP dummy batches while asleep. */
export function resumesOnPartialWake(version: string): boolean {
  return versionBefore(version, PARTIAL_WAKE_FIXED_IN);
}

/**
 * The load formats whose loader is DefaultModelLoader, the only one with
 * get_all_weights (V:vllm/model_executor/model_loader/__init__.py:33-62;
 * default_loader.py:321): any other makes reload_weights raise.
 */
const RELOADABLE = new Set(['auto', 'hf', 'safetensors', 'pt', 'npcache', 'fastsafetensors', 'instanttensor', 'mistral']);

/** The LoadFormats literal (V:vllm/model_executor/model_loader/__init__.py:33-48): --load-format's choices. */
export const LOAD_FORMATS = ['auto', 'hf', 'dummy', 'fastsafetensors', 'instanttensor', 'mistral', 'modelexpress', 'npcache', 'pt', 'runai_streamer', 'runai_streamer_sharded', 'safetensors', 'sharded_state', 'tensorizer'];

/**
 * reload_weights' NotImplementedError for a loader without get_all_weights
 * (V:vllm/v1/worker/gpu_model_runner.py:5671-5676), raised before anything is
 * loaded; undefined for a loader that reloads.
 */
export function reloadRefusal(loadFormat: string): string | undefined {
  return RELOADABLE.has(loadFormat) ? undefined : `NotImplementedError: Model reloading with \`${loadFormat}\` format`;
}

/**
 * How long reload_weights takes: it reads every checkpoint file again
 * through the loader (V:vllm/v1/worker/gpu_model_runner.py:5670-5690), so
 * with --sim-disk-rate the weights' MiB at that many MiB/s; without it
 * --sim-wake-time.
 */
export function reloadMs(weightsMib: number, diskMibPerS: number | undefined, wakeTimeMs: number): number {
  return diskMibPerS !== undefined && diskMibPerS > 0 ? Math.round((weightsMib * 1000) / diskMibPerS) : wakeTimeMs;
}

/**
 * Speculative decoding in the double (--speculative-config): a draft
 * proposes one token a step, accepted while its weights are valid. A level-2
 * sleep discards the draft's weights with the target's, and reload_weights
 * loads `self.get_model()`, the target only (V:vllm/v1/worker/gpu_model_runner.py:5663;
 * vLLM #52479: "every drafted token is rejected … decode throughput falls to
 * roughly the no-speculation rate"): the accepted counter stops and each
 * token takes twice as long, the answers unchanged.
 */
export class FakeSpecDecode {
  #draftValid = true;
  #drafted = 0;
  #accepted = 0;

  constructor(
    readonly enabled: boolean,
    private readonly slowDown: () => void,
  ) {}

  /** A level-2 sleep freed the draft with every `weights` allocation. */
  discarded(): void {
    if (!this.enabled || !this.#draftValid) return;
    this.#draftValid = false;
    this.slowDown();
    vllmLog('WARNING', 'gpu_model_runner.py:5663', 'reload_weights reloads the target model only: the draft model keeps freed memory and every drafted token is rejected (vLLM #52479)');
  }

  /** One generated token: one drafted, accepted while the draft holds its weights. */
  token(): void {
    if (!this.enabled) return;
    this.#drafted++;
    if (this.#draftValid) this.#accepted++;
  }

  /** vllm:spec_decode_num_draft_tokens_total and …num_accepted_tokens_total (V:vllm/v1/spec_decode/metrics.py:229-231; prometheus_client adds _total). */
  metricsText(label: string): string {
    if (!this.enabled) return '';
    const one = (name: string, help: string, v: number) => `# HELP ${name} ${help}\n# TYPE ${name} counter\n${name}{${label}} ${v.toFixed(1)}\n`;
    return one('vllm:spec_decode_num_draft_tokens_total', 'Number of draft tokens.', this.#drafted) + one('vllm:spec_decode_num_accepted_tokens_total', 'Number of accepted tokens.', this.#accepted);
  }
}
