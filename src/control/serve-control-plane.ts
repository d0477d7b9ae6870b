import { toProtoJson } from '../lib/proto-json.js';
import { RegisterSchema, ShardStatusSchema } from '../gen/llmgw/v1/agent_pb.js';
import { usageError } from '../lib/errors.js';
import { ControlPlane, type ControlPlaneOptions } from './control-plane.js';
import { DEFAULT_AGENT_STOP_GRACE_MS } from './rank-ordered-stops.js';

export interface ServeControlPlaneOptions extends ControlPlaneOptions {
  listen: { host: string; port: number };
  /** Aborting it closes the control plane; serveControlPlane then resolves. */
  signal: AbortSignal;
  /** Called once listening, with the URL agents connect to. */
  onListening?: (url: string) => void;
  /** With it, every event is passed on as one JSON-ready object (`--json-events`). */
  onEvent?: (event: Record<string, unknown>) => void;
  /**
   * On abort, stop every shard through its agent (and wait up to
   * STOP_ON_EXIT_TIMEOUT_MS for them to be reported gone) before closing:
   * the teardown of a local cluster (`--stop-on-exit`). Off by default: a
   * control plane that restarts must leave the fleet serving.
   */
  stopShardsOnExit?: boolean;
  /** Lines for the operator while stopping shards (stdout of the command). */
  onProgress?: (line: string) => void;
}

/**
 * Rank 0's stop and then its worker ranks' (a multi-node replica is stopped
 * in that order), each up to the agent's default stop_grace (30s), plus
 * slack for the reports to arrive.
 */
export const STOP_ON_EXIT_TIMEOUT_MS = 2 * DEFAULT_AGENT_STOP_GRACE_MS + 10_000;

/** Runs a control plane until `signal` aborts, then closes it; `llmgw dev control-plane` is this. */
export async function serveControlPlane(opts: ServeControlPlaneOptions): Promise<{ url: string }> {
  const { listen, signal, onListening, onEvent, stopShardsOnExit, onProgress, ...cpOptions } = opts;
  let cp: ControlPlane;
  try {
    cp = new ControlPlane(cpOptions);
  } catch (err) {
    // A port range the options (flags) got wrong is the operator's to fix, not a crash.
    if (err instanceof RangeError) throw usageError(err.message);
    throw err;
  }
  if (onEvent) forwardEvents(cp, onEvent);
  const closed = new Promise<void>((resolve) => {
    const close = () => void stopShards().then(() => cp.close().then(resolve));
    if (signal.aborted) close();
    else signal.addEventListener('abort', close, { once: true });
  });
  async function stopShards(): Promise<void> {
    if (!stopShardsOnExit || cp.state !== 'listening') return;
    const r = await cp.stopAllShards({ timeoutMs: STOP_ON_EXIT_TIMEOUT_MS });
    onProgress?.(`stopped ${r.stopped.length} shard(s)${r.stopped.length ? `: ${r.stopped.join(', ')}` : ''}`);
    if (r.remaining.length > 0) {
      onProgress?.(`not reported stopped (an agent away or slow; their engines may still run): ${r.remaining.join(', ')}`);
    }
  }
  let url: string;
  try {
    url = (await cp.listen(listen)).url;
  } catch (err) {
    await cp.close();
    throw err;
  }
  onListening?.(url);
  onEvent?.({ event: 'listening', url });
  await closed;
  return { url };
}

function forwardEvents(cp: ControlPlane, onEvent: (event: Record<string, unknown>) => void): void {
  const at = () => new Date().toISOString();
  cp.on('node-registered', (nodeId, register) => onEvent({ event: 'node-registered', at: at(), nodeId, register: toProtoJson(RegisterSchema, register) }));
  cp.on('node-disconnected', (nodeId, reason) => onEvent({ event: 'node-disconnected', at: at(), nodeId, reason }));
  cp.on('node-refused', (nodeId, reason) => onEvent({ event: 'node-refused', at: at(), nodeId, reason }));
  cp.on('shard-status', (nodeId, status) => onEvent({ event: 'shard-status', at: at(), nodeId, status: toProtoJson(ShardStatusSchema, status) }));
  cp.on('replica-ready', (replica) => onEvent({ event: 'replica-ready', at: at(), replica }));
}
