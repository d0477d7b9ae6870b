import { formatAge } from '../lib/format-age.js';
import { renderTable } from '../lib/table.js';
import { formatBytes } from '../lib/format-bytes.js';
import type { StoredModel } from './scan-store.js';

/** `llmgw models list`'s table. */
export function renderModelsList(models: readonly StoredModel[], budget: number, compileBytes = 0, nowMs = Date.now()): string {
  const used = models.reduce((s, m) => s + m.bytes, 0) + compileBytes;
  const footer = `${formatBytes(used)} of ${formatBytes(budget)} (models.budget) used${compileBytes > 0 ? `, ${formatBytes(compileBytes)} of it the engines' compile caches (removed with their model)` : ''}`;
  if (models.length === 0) return `no models in the store\n${footer}`;
  const rows = models.map((m) => [
    m.repo,
    Object.entries(m.refs).map(([rev, c]) => (rev === c ? c.slice(0, 12) : `${rev}=${c.slice(0, 12)}`)).join(' ') || '-',
    // subset: every file its --include chose is here, not the whole repo, so its shards start online.
    m.pulling ? 'pulling' : m.complete ? (m.subset ? 'subset' : 'complete') : 'partial',
    formatBytes(m.bytes),
    m.lastUsedMs > 0 ? formatAge(nowMs - m.lastUsedMs) : '-',
    m.pins.join(',') || '-',
  ]);
  return `${renderTable(['MODEL', 'REVISIONS', 'STATE', 'SIZE', 'LAST USED', 'PINNED BY'], rows)}\n${footer}`;
}
