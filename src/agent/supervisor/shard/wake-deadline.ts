import type { MeasuredRate } from '../../../models/modelled-warmth.js';

/*
 * How long a wake may take (issue 47 item 5; review engine-fidelity-3 E7).
 * vLLM's level-2 wake reloads the weights: reload_weights reads every
 * checkpoint file again through the loader (V:vllm/v1/worker/gpu_model_runner.py:5670-5690),
 * the cost of a start's weight load, hundreds of GB for the largest models.
 * Inside the fixed 120 s a large model failed on time, the engine kept
 * reading (an HTTP abort does not stop a utility call), and the retry read
 * it all again. Other wakes copy from host RAM or map memory: the fixed
 * deadline holds.
 */

/** A wake that reads nothing from disk, and the fixed part of one that does: the calls, readiness, memory, known answer. */
export const BASE_WAKE_TIMEOUT_MS = 120_000;
/** The node's disk rate before any warm measured it: a slow network volume's, so that a first wake is not cut short. */
export const ASSUMED_DISK_BYTES_PER_S = 200 * 1024 * 1024;
/** The read may take this many times the measured rate's figure: a cold read beside other engines' traffic is slower than a warm's. */
export const DISK_READ_MARGIN = 2;

export interface WakeDeadlineInput {
  engine: string;
  level: 1 | 2;
  /** The model's bytes in the node's store; 0 when unknown (no store, not in it). */
  modelBytes: number;
  /** What the shard's GPUs held awake, an upper bound of its weights: used when the store does not know the model. */
  awakeMib: number;
  /** The node's last measured disk rate (WarmthLedger's learnRate('disk', …)); undefined before one. */
  disk?: MeasuredRate;
  /** supervisor.wake_timeout; 0 or undefined: derived. */
  configuredMs?: number;
}

/** The deadline of a wake, with the one line that says how it was reached (logged at the wake). */
export function wakeDeadline(w: WakeDeadlineInput): { ms: number; why: string } {
  if (w.configuredMs !== undefined && w.configuredMs > 0) return { ms: w.configuredMs, why: 'supervisor.wake_timeout' };
  if (w.engine !== 'vllm' || w.level !== 2) return { ms: BASE_WAKE_TIMEOUT_MS, why: 'no read from disk' };
  const bytes = w.modelBytes > 0 ? w.modelBytes : w.awakeMib * 1024 * 1024;
  const perS = w.disk && w.disk.ms > 0 ? (w.disk.bytes * 1000) / w.disk.ms : ASSUMED_DISK_BYTES_PER_S;
  const readMs = (DISK_READ_MARGIN * bytes * 1000) / perS;
  const ms = Math.ceil(BASE_WAKE_TIMEOUT_MS + readMs);
  const mib = (n: number) => `${Math.round(n / (1024 * 1024))} MiB`;
  const source = w.modelBytes > 0 ? 'the model in the store' : 'what its GPUs held awake';
  const rate = w.disk ? `the disk rate measured here (${mib(perS)}/s)` : `an assumed ${mib(perS)}/s (no disk rate measured yet)`;
  return { ms, why: `level-2 reload of ${mib(bytes)} (${source}) at ${rate}, ${DISK_READ_MARGIN}x, plus ${BASE_WAKE_TIMEOUT_MS / 1000} s` };
}
