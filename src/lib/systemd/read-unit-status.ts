import { failure } from '../errors.js';
import { runSystemctl } from './run-systemctl.js';

/** What the agent reads of an engine's unit (`systemctl show`). */
export const UNIT_STATUS_PROPERTIES = [
  'LoadState',
  'ActiveState',
  'SubState',
  'Result',
  'InvocationID',
  'MainPID',
  'ExecMainPID',
  'ExecMainCode',
  'ExecMainStatus',
  // Where the unit's processes are: what a stop waits to be empty once the main process is gone.
  'ControlGroup',
] as const;

export type UnitStatus = Record<(typeof UNIT_STATUS_PROPERTIES)[number], string>;

/** `KEY=value` lines, as `systemctl show -p ...` prints them. */
export function parseShow(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const eq = line.indexOf('=');
    if (eq > 0) out[line.slice(0, eq)] = line.slice(eq + 1);
  }
  return out;
}

/**
 * The unit's status as systemd holds it now. A unit systemd does not know
 * reads LoadState=not-found with every other field empty, which is an answer,
 * not an error; only systemctl failing to answer at all throws.
 */
export async function readUnitStatus(unit: string, signal?: AbortSignal): Promise<UnitStatus> {
  const r = await runSystemctl(['show', ...UNIT_STATUS_PROPERTIES.flatMap((p) => ['-p', p]), '--', unit], { signal });
  if (r.exitCode !== 0) throw failure(`systemctl show ${unit} exited ${r.exitCode}: ${r.stderr.trim() || 'no message'}; is systemd running?`);
  const props = parseShow(r.stdout);
  return Object.fromEntries(UNIT_STATUS_PROPERTIES.map((p) => [p, props[p] ?? ''])) as UnitStatus;
}
