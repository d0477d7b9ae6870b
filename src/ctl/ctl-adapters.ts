import type { AdaptersResponseJson } from '../gen/llmgw/v1/admin_pb.js';
import { usageError } from '../lib/errors.js';
import { printable } from '../lib/printable.js';
import { parseShardId } from '../lib/shard-id.js';
import { renderTable } from '../lib/table.js';
import { callUnaryJson } from './call-unary-json.js';
import { enumLabel } from './enum-label.js';

/** How long `ctl adapters --load/--unload` waits: a pull of the adapter, its drain (30 s) and its proof. */
export const DEFAULT_ADAPTERS_TIMEOUT_MS = 5 * 60_000;

/** What `--load name=org/repo@revision` says; the agent checks each part as a SetAdapters' (one line when wrong). */
export function parseLoadFlag(text: string, pinned: boolean): { name: string; repo: string; revision: string; pinned: boolean } {
  const m = /^([^=]+)=([^@]+)(?:@(.+))?$/.exec(text);
  if (!m) throw usageError(`--load ${JSON.stringify(text.slice(0, 80))} is not name=org/repo or name=org/repo@revision`);
  return { name: m[1] as string, repo: m[2] as string, revision: m[3] ?? '', pinned };
}

/** Reads a shard's adapters, or changes its desired set by one (load or unload) and answers once reconciled. */
export function ctlAdapters(socket: string, shardId: string, change: { load?: ReturnType<typeof parseLoadFlag>; unload?: string }, timeoutMs = DEFAULT_ADAPTERS_TIMEOUT_MS): Promise<AdaptersResponseJson> {
  parseShardId(shardId);
  return callUnaryJson<AdaptersResponseJson>(socket, change.load || change.unload ? 'ChangeAdapters' : 'Adapters', { shardId, ...(change.load ? { load: change.load } : {}), ...(change.unload ? { unload: change.unload } : {}) }, { timeoutMs });
}

/** The human form: one row per adapter, then the limits. */
export function renderAdapters(r: AdaptersResponseJson): string {
  const rows = (r.adapters ?? []).map((a) => [
    printable(a.name ?? ''),
    printable(`${a.repo ?? ''}@${a.revision || 'main'}`),
    enumLabel(a.state, 'ADAPTER_STATE_') || '?',
    a.rank ? String(a.rank) : '-',
    a.loadMs ? `${a.loadMs} ms` : '-',
    (a.digest ?? '').replace(/^sha256:/, '').slice(0, 12) || '-',
    printable(a.reason ?? ''),
  ]);
  const limits = r.maxAdapters ? `at most ${r.maxAdapters} loaded, rank ≤ ${r.maxAdapterRank}` : 'started without LoRA (max_adapters 0)';
  if (rows.length === 0) return `shard ${r.shardId}: no adapters (${limits})`;
  return `${renderTable(['NAME', 'REPO', 'STATE', 'RANK', 'LOAD', 'DIGEST', 'REASON'], rows)}\nshard ${r.shardId}: ${limits}`;
}
