import { fleetRestart, BURST_WINDOW_MS } from './fleet.js';

/** A row of bench/run.ts's table. */
export interface BenchRow {
  figure: string;
  measured: string;
  reference: string;
  target: string;
  met: boolean | undefined;
}

/** 50 agents: the brief's fleet; a quarter of them is the most one burst window may hold. */
export const FLEET_AGENTS = 50;

/**
 * `--only fleet`: the fleet restarted with jitter and, beside it, without.
 * The jitter-off run goes second so that the page cache and the machine are
 * as warm for it as they can be: if anything, that flatters jitter off.
 */
export async function fleetFigure(rows: BenchRow[], notes: string[]): Promise<void> {
  const on = await fleetRestart({ agents: FLEET_AGENTS, jitter: true });
  const off = await fleetRestart({ agents: FLEET_AGENTS, jitter: false });
  const s = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
  rows.push({
    figure: `fleet ${FLEET_AGENTS} agents, control plane restarted: close → every agent registered again`,
    measured: s(on.allRegisteredMs),
    reference: `jitter off: ${s(off.allRegisteredMs)}`,
    target: 'recorded',
    met: undefined,
  });
  const quarter = Math.floor(FLEET_AGENTS / 4);
  rows.push({
    figure: `fleet most Registers in any ${BURST_WINDOW_MS} ms after the restart`,
    measured: String(on.maxInWindow),
    reference: `jitter off: ${off.maxInWindow}`,
    target: `<= ${quarter} (a quarter of the agents)`,
    met: on.maxInWindow <= quarter,
  });
  const pct = (xs: number[], p: number) => xs[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))] as number;
  for (const r of [on, off]) {
    notes.push(
      `fleet ${r.jitter ? 'jitter on' : 'jitter off'}: the control plane was down ${r.restartGapMs.toFixed(0)} ms (close, then listen on the same port); Registers after close at p10 ${s(pct(r.arrivalsMs, 10))}, p50 ${s(pct(r.arrivalsMs, 50))}, p90 ${s(pct(r.arrivalsMs, 90))}, last ${s(r.allRegisteredMs)} (${s(r.allRegisteredMs - r.restartGapMs)} after the new one listened); most in ${BURST_WINDOW_MS} ms: ${r.maxInWindow}`,
    );
  }
}
