/**
 * The fleet figure: many real agents (`llmgw agent run` processes) against
 * one reference control plane, which is then restarted on the same port, as
 * an upgrade of the control plane does. Measured: how long until every agent
 * has registered again, and the most Registers that arrive within any 100 ms,
 * the burst a restarted control plane must absorb. Run with reconnect jitter
 * and, for comparison, without it (LLMGW_INTERNAL_RECONNECT_JITTER=off).
 */
import { ControlPlane } from '../src/control/control-plane.js';
import type { AgentMessage } from '../src/gen/llmgw/v1/agent_pb.js';
import { JITTER_ENV } from '../src/agent/connection/reconnect-delay.js';
import { cleanup, freePort, newRoot, sleep, spawnAgent } from './bench-support.js';

/** The window a burst is counted in. */
export const BURST_WINDOW_MS = 100;

export interface FleetRestartResult {
  agents: number;
  jitter: boolean;
  /** From the old control plane's close() to the last agent's Register on the new one. */
  allRegisteredMs: number;
  /** The most Registers received within any BURST_WINDOW_MS. */
  maxInWindow: number;
  /** From close() to the new control plane listening: the outage itself. */
  restartGapMs: number;
  /** Registers' arrival after close(), sorted, in ms. */
  arrivalsMs: number[];
}

/** The most of the sorted times `ts` that fall within any half-open window of `windowMs`. */
export function maxInWindow(ts: readonly number[], windowMs: number): number {
  const s = [...ts].sort((a, b) => a - b);
  let best = 0;
  let i = 0;
  for (let j = 0; j < s.length; j++) {
    while ((s[j] as number) - (s[i] as number) >= windowMs) i++;
    best = Math.max(best, j - i + 1);
  }
  return best;
}

/**
 * Starts `agents` agents in batches of `batch` (each batch registered before
 * the next: 50 cold starts at once on two cores measure the machine, not the
 * agent), with production reconnect timers (reconnect_base 1s, max 30s) and
 * a 5 s heartbeat, then restarts the control plane once and records the
 * Registers that follow. Every process is killed by cleanup() at the end.
 */
export async function fleetRestart(opts: { agents: number; jitter: boolean; batch?: number }): Promise<FleetRestartResult> {
  const port = await freePort();
  const host = '127.0.0.1';
  let cp = new ControlPlane({ placementDelayMs: 0 });
  const { url } = await cp.listen({ host, port });
  const ids = Array.from({ length: opts.agents }, (_, i) => `fleet-${String(i).padStart(3, '0')}`);
  const batch = opts.batch ?? 10;
  try {
    for (let b = 0; b < ids.length; b += batch) {
      const some = ids.slice(b, b + batch);
      const registered = some.map((id) => cp.waitFor(id, (m) => m.msg.case === 'register', 120_000));
      for (const id of some) {
        spawnAgent(url, newRoot(id), {
          nodeId: id,
          heartbeat: '5s',
          reconnect: { base: '1s', max: '30s' },
          env: opts.jitter ? {} : { [JITTER_ENV]: 'off' },
        });
      }
      await Promise.all(registered);
    }
    // Let the last batch's start-up (discovery, the first heartbeats) settle.
    await sleep(2000);

    const arrivals = new Map<string, number>();
    let t0 = 0;
    let allDone = () => {};
    const done = new Promise<void>((resolve) => {
      allDone = resolve;
    });
    const onMessage = (nodeId: string, m: AgentMessage) => {
      if (m.msg.case !== 'register' || arrivals.has(nodeId)) return;
      arrivals.set(nodeId, performance.now() - t0);
      if (arrivals.size === ids.length) allDone();
    };
    t0 = performance.now();
    await cp.close();
    cp = new ControlPlane({ placementDelayMs: 0 });
    cp.on('message', onMessage);
    await cp.listen({ host, port });
    const restartGapMs = performance.now() - t0;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${ids.length - arrivals.size} of ${ids.length} agents had not registered again after 120 s`)), 120_000);
    });
    try {
      await Promise.race([done, late]);
    } finally {
      clearTimeout(timer);
    }
    const arrivalsMs = [...arrivals.values()].sort((a, b) => a - b);
    return {
      agents: ids.length,
      jitter: opts.jitter,
      allRegisteredMs: arrivalsMs.at(-1) as number,
      maxInWindow: maxInWindow(arrivalsMs, BURST_WINDOW_MS),
      restartGapMs,
      arrivalsMs,
    };
  } finally {
    await cleanup();
    await cp.close();
  }
}
