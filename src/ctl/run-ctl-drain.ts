import type { DrainResponseJson } from '../gen/llmgw/v1/admin_pb.js';
import { failure } from '../lib/errors.js';
import { type CtlDrainOptions, ctlDrain } from './ctl-drain.js';

export interface CtlDrainOutput {
  /** What `--json` prints: the agent's last DrainResponse. */
  response: DrainResponseJson;
  /** The human summary. */
  text: string;
}

/**
 * All of `llmgw ctl drain` but parsing and printing: drain (or, with
 * `cancel`, undo a drain), then summarize the agent's last answer. A timeout
 * with requests left is a failure (exit 1) whose message names what is left;
 * the last DrainResponse goes with it as the `drain` detail, so `--json`
 * still shows where each shard stood.
 */
export async function runCtlDrain(o: CtlDrainOptions): Promise<CtlDrainOutput> {
  const last = await ctlDrain(o);
  const [{ renderDrainSummary }, { toProtoJson }, { DrainResponseSchema }] = await Promise.all([
    import('./render-drain-summary.js'),
    import('../lib/proto-json.js'),
    import('../gen/llmgw/v1/admin_pb.js'),
  ]);
  const summary = renderDrainSummary(last, { wait: o.wait, timeoutMs: o.timeoutMs, cancel: o.cancel });
  const response = toProtoJson(DrainResponseSchema, last) as DrainResponseJson;
  if (summary.error) throw failure(summary.error, { details: { drain: response } });
  return { response, text: summary.text };
}
