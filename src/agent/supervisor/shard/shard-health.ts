import { ShardState } from '../../../gen/llmgw/v1/agent_pb.js';
import type { HealthVerdict } from '../probes/health-watch.js';

const S = ShardState;

/** What the runner must do after a health input: set the error when given, then make the transition when given. */
export interface HealthChange {
  error?: string;
  to?: ShardState;
  why: string;
}

/**
 * The health judgement of a serving shard, from two inputs: the health
 * probe's verdicts and faults of its GPUs. It only decides: the runner
 * applies each change through its transition function, so the state still
 * changes in one place.
 */
export class ShardHealth {
  /** A fault of one of the shard's GPUs ("GPU 3: Xid 79: ..."), '' when they are sound. */
  private gpuFault = '';
  /** The probe's last verdict: a cleared GPU fault returns the shard to READY only if it answers. */
  private probeHealthy = true;
  /** A DRAINING shard keeps it for when its drain is cancelled. */
  private verdict: HealthVerdict = { healthy: true, cause: undefined, why: 'answers /health' };

  get lastVerdict(): HealthVerdict {
    return this.verdict;
  }

  /**
   * The shard began serving. A fault raised while the engine was loading
   * (STARTING cannot become UNHEALTHY): UNHEALTHY at once, so no traffic
   * stays on a failing GPU.
   */
  serving(): HealthChange | undefined {
    return this.gpuFault === '' ? undefined : this.unhealthyForGpu();
  }

  /** Makes the state agree with the verdict; every tick calls it, so only a disagreement changes anything. */
  judge(v: HealthVerdict, state: ShardState): HealthChange | undefined {
    this.verdict = v;
    this.probeHealthy = v.healthy;
    if (!v.healthy && state === S.READY) return { error: v.why, to: S.UNHEALTHY, why: v.why };
    if (!v.healthy && state === S.UNHEALTHY) {
      // Still unhealthy, maybe for another cause now: status shows the latest, without a new report each tick.
      // A GPU fault stays the cause while it lasts.
      return this.gpuFault === '' ? { error: v.why, why: v.why } : undefined;
    }
    // An engine answering again on a faulted GPU stays UNHEALTHY: the GPU, not the engine, is the cause.
    if (v.healthy && state === S.UNHEALTHY && this.gpuFault === '') return { error: '', to: S.READY, why: v.why };
    return undefined;
  }

  /**
   * One of the shard's GPUs has a fault: a READY shard becomes UNHEALTHY with
   * the fault as its error, and stays so while the fault lasts. The engine is
   * not touched: the control plane decides whether to replace it.
   */
  markFault(reason: string, state: ShardState): HealthChange | undefined {
    if (reason === '' || reason === this.gpuFault) return undefined;
    this.gpuFault = reason;
    if (state === S.READY) return this.unhealthyForGpu();
    if (state === S.UNHEALTHY || state === S.DRAINING) return { error: reason, why: reason };
    return undefined;
  }

  /** The shard's GPUs are sound again: back to READY, unless the health probe says otherwise. */
  clearFault(state: ShardState, error: string): HealthChange | undefined {
    if (this.gpuFault === '') return undefined;
    const was = this.gpuFault;
    this.gpuFault = '';
    const change: HealthChange = { why: `GPU fault cleared (${was})` };
    if (error === was) change.error = '';
    if (state === S.UNHEALTHY && this.probeHealthy) change.to = S.READY;
    return change;
  }

  private unhealthyForGpu(): HealthChange {
    return { error: this.gpuFault, to: S.UNHEALTHY, why: this.gpuFault };
  }
}
