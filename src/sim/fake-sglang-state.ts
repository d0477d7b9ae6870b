/**
 * The SGLang double's phases and the state its modules share: the server
 * (fake-sglang.ts) moves the phase and writes the rest, its routes
 * (fake-sglang-routes.ts) read them.
 */

/**
 * loading: no HTTP until the schedulers are ready; starting: HTTP up, warmup
 * not done (/health 503); up; draining: SIGTERM seen; exiting.
 * S:python/sglang/srt/managers/tokenizer_manager.py:3576-3579 (Up/Starting/UnHealthy).
 */
export type SglangPhase = 'loading' | 'starting' | 'up' | 'draining' | 'exiting';

export const SGLANG_NEXT: Record<SglangPhase, readonly SglangPhase[]> = {
  loading: ['starting', 'up', 'exiting'],
  starting: ['up', 'draining', 'exiting'],
  up: ['draining', 'exiting'],
  draining: ['exiting'],
  exiting: [],
};

export interface SglangState {
  /** Moved only by the server's setPhase, along SGLANG_NEXT. */
  phase: SglangPhase;
  // S:python/sglang/srt/managers/tokenizer_manager.py:3576-3579: set by a /health_generate that timed out.
  unhealthy: boolean;
  hung: boolean;
  // The tokenizer's last_receive_tstamp: when any output last arrived.
  lastOutputAt: number;
  // The name the tokenizer serves under: a weight update from disk replaces it by its model_path
  // (S:python/sglang/srt/managers/tokenizer_manager.py:2099-2103).
  servedName: string;
  modelPath: string;
}
