import { formatAge } from '../lib/format-age.js';
import { printable } from '../lib/printable.js';
import { renderTable } from '../lib/table.js';
import { formatBytes } from '../lib/format-bytes.js';
import type { StoredModel } from './scan-store.js';

/**
 * `llmgw models list`'s table. IN MEMORY: the model's bytes in the page
 * cache now (fincore), what a start reads at memory speed (issue 41); '-'
 * where it could not be read. KIND, BASE and RANK: a LoRA adapter's base
 * model and rank (issue 53), '?' while its config is not read yet.
 */
export function renderModelsList(models: readonly StoredModel[], budget: number, compileBytes = 0, nowMs = Date.now(), resident: ReadonlyMap<string, number> = new Map()): string {
  const used = models.reduce((s, m) => s + m.bytes, 0) + compileBytes;
  const footer = `${formatBytes(used)} of ${formatBytes(budget)} (models.budget) used${compileBytes > 0 ? `, ${formatBytes(compileBytes)} of it the engines' compile caches (removed with their model)` : ''}`;
  if (models.length === 0) return `no models in the store\n${footer}`;
  // Printable: a record's text never reaches the terminal raw (security review 3, S2).
  const rows = models.map((m) => [
    printable(m.repo),
    printable(Object.entries(m.refs).map(([rev, c]) => (rev === c ? c.slice(0, 12) : `${rev}=${c.slice(0, 12)}`)).join(' ')) || '-',
    // subset: every file its --include chose is here, not the whole repo, so its shards start online.
    m.pulling ? 'pulling' : m.complete ? (m.subset ? 'subset' : 'complete') : 'partial',
    formatBytes(m.bytes),
    inMemory(resident.get(m.repo), m.bytes),
    m.lastUsedMs > 0 ? formatAge(nowMs - m.lastUsedMs) : '-',
    printable(m.pins.join(',')) || '-',
    // A LoRA adapter: the model it was trained on and its rank, what an engine's --max-lora-rank must allow.
    m.kind ?? 'model',
    m.kind === 'adapter' ? printable(m.baseModel ?? '?') : '-',
    m.kind === 'adapter' ? String(m.rank ?? '?') : '-',
  ]);
  return `${renderTable(['MODEL', 'REVISIONS', 'STATE', 'SIZE', 'IN MEMORY', 'LAST USED', 'PINNED BY', 'KIND', 'BASE', 'RANK'], rows)}\n${footer}`;
}

function inMemory(resident: number | undefined, bytes: number): string {
  if (resident === undefined || bytes <= 0) return '-';
  return `${formatBytes(resident)} (${Math.round((100 * Math.min(resident, bytes)) / bytes)}%)`;
}
