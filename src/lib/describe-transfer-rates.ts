import type { InventoryJson } from '../gen/llmgw/v1/agent_pb.js';
import { formatAge } from './format-age.js';
import { formatBytes } from './format-bytes.js';

type RateJson = NonNullable<NonNullable<InventoryJson['rates']>['diskWrite']>;

/**
 * Inventory.rates as one line for `ctl status` and `discover`: "disk write
 * 812 MiB/s (probe, 2h ago), disk read 1.9 GiB/s (warm, 5m ago), last pull
 * 240 MiB/s (pull, 1d ago)"; undefined when nothing is measured. `nowMs`
 * makes ages testable.
 */
export function describeTransferRates(inv: InventoryJson, nowMs: number): string | undefined {
  const r = inv.rates;
  if (!r) return undefined;
  const one = (name: string, x: RateJson | undefined) => {
    if (!x) return `${name} not measured`;
    const at = Date.parse(x.measuredAt ?? '');
    return `${name} ${formatBytes(Number(x.bytesPerSecond ?? 0))}/s (${x.source ?? '?'}${Number.isNaN(at) ? '' : `, ${formatAge(nowMs - at)} ago`})`;
  };
  return [one('disk write', r.diskWrite), one('disk read', r.diskRead), one('last pull', r.lastPull)].join(', ');
}
