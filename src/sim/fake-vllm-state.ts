/**
 * The vLLM double's phases and the state its modules share: the engine
 * (fake-vllm.ts) moves the phase and sets `hung`, its routes
 * (fake-vllm-routes.ts) read them.
 */

/**
 * loading: port closed; serving; draining: SIGTERM with --shutdown-timeout
 * > 0; failed: the engine is dead, /health 503 until the watchdog exits;
 * exiting: the answer is decided.
 */
export type VllmPhase = 'loading' | 'serving' | 'draining' | 'failed' | 'exiting';

export const VLLM_NEXT: Record<VllmPhase, readonly VllmPhase[]> = {
  loading: ['serving', 'failed', 'exiting'],
  serving: ['draining', 'failed', 'exiting'],
  draining: ['failed', 'exiting'],
  failed: ['exiting'],
  exiting: [],
};

export interface VllmState {
  /** Moved only by the engine's setPhase, along VLLM_NEXT. */
  phase: VllmPhase;
  /** --sim-hang-after: the engine accepts connections and says nothing. */
  hung: boolean;
}
