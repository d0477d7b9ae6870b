import type { ControlPlaneConnectionJson, ControlPlaneTlsJson, ShardInfoJson, StatusResponseJson } from '../gen/llmgw/v1/admin_pb.js';
import type { InventoryJson } from '../gen/llmgw/v1/agent_pb.js';
import { describeEngineAccount } from '../lib/describe-engine-account.js';
import { describeTransferRates } from '../lib/describe-transfer-rates.js';
import { formatAge } from '../lib/format-age.js';
import { printable } from '../lib/printable.js';
import { renderTable } from '../lib/table.js';
import { describeNodeConditions, repeatsCondition } from './describe-node-conditions.js';
import { warmthLines } from './describe-warmth.js';
import { enumLabel } from './enum-label.js';
import { renderGpuStatus } from './render-gpu-status.js';

export const SHARD_TABLE_HEADER = ['SHARD', 'REPLICA', 'ENGINE', 'MODEL', 'STATE', 'PID', 'PORT', 'GPUS', 'AGE', 'ADOPTED', 'UNIT'] as const;

/**
 * The human form of `ctl status`, from the response's proto JSON (what
 * `--json` prints): the agent, its control-plane connection, an inventory
 * summary, a table of GPUs with their health, and a table of shards. `nowMs` makes ages testable.
 */
export function renderStatus(s: StatusResponseJson, nowMs: number, opts: { endedHidden?: boolean } = {}): string {
  const started = Date.parse(s.startedAt ?? '');
  const lines = [
    `node       ${printable(s.nodeId ?? '?')}  (llmgw ${s.version ?? '?'}, pid ${s.pid ?? '?'}, up ${Number.isNaN(started) ? '?' : formatAge(nowMs - started)})`,
    `control    ${printable(describeConnection(s.connection ?? {}, nowMs))}`,
    ...(s.connection?.tls ? [`tls        ${printable(describeTls(s.connection.tls, nowMs))}`] : []),
    `inventory  ${printable(describeInventory(s.inventory ?? {}))}`,
  ];
  const conditions = describeNodeConditions(s.inventory ?? {}, nowMs);
  if (conditions) lines.push(`conditions ${printable(conditions)}`);
  for (const w of s.inventory?.warnings ?? []) if (!repeatsCondition(w, s.inventory ?? {})) lines.push(`warning    ${printable(w)}`);
  // Who each engine runs as: an engine that runs as root, or is refused for it, is seen before a start fails.
  for (const a of s.engineAccounts ?? []) lines.push(`account    ${printable(describeEngineAccount(a))}`);
  // How soon each model measured here would be READY again (issue 41).
  for (const w of warmthLines(s.inventory ?? {})) lines.push(`warmth     ${printable(w)}`);
  // What the node measured of its disk and its last pull (issue 52): a pull's or warm's rate is a fraction of these.
  const rates = describeTransferRates(s.inventory ?? {}, nowMs);
  if (rates) lines.push(`rates      ${printable(rates)}`);
  const gpuLines = renderGpuStatus(s, nowMs);
  if (gpuLines.length > 0) lines.push('', ...gpuLines);
  const shards = s.shards ?? [];
  lines.push('');
  // Ended shards are left out by default (StatusRequest.all): say so, so that a crash is not taken for nothing.
  const n = opts.endedHidden ? (s.endedHidden ?? 0) : 0;
  const hidden = n > 0 ? [`${n} ended shard${n === 1 ? '' : 's'} (STOPPED, FAILED, EXITED) whose engine is gone ${n === 1 ? 'is' : 'are'} not listed: ctl status --all`] : [];
  if (shards.length === 0) {
    lines.push('no shards', ...hidden);
    return lines.join('\n');
  }
  lines.push(renderTable(SHARD_TABLE_HEADER, shards.map((sh) => shardRow(sh, nowMs).map(printable))));
  for (const sh of shards) {
    if (sh.error) lines.push(printable(`${sh.shardId}: ${sh.error}${sh.exitCode ? ` (exit code ${sh.exitCode})` : ''}`));
    if (sh.note) lines.push(printable(`${sh.shardId}: note: ${sh.note}`));
    if (sh.engineVersion) lines.push(printable(`${sh.shardId}: engine version ${sh.engineVersion}`));
    // What it serves by content (issue 51): the store's verified digest, the same as Inventory.cached_models' content_digest.
    if (sh.modelDigest) lines.push(printable(`${sh.shardId}: serves model content ${sh.modelDigest}`));
    if (sh.gang) lines.push(printable(`${sh.shardId}: ${sh.gang}`));
  }
  lines.push(...hidden);
  return lines.join('\n');
}

export function describeConnection(c: ControlPlaneConnectionJson, nowMs: number): string {
  const to = `${c.server ?? '?'} (${c.protocol || 'connect'})`;
  const state = enumLabel(c.state, 'CONNECTION_STATE_');
  switch (state) {
    case 'CONNECTED': {
      const since = Date.parse(c.connectedSince ?? '');
      return Number.isNaN(since)
        ? `connected to ${to}`
        : `connected to ${to} since ${new Date(since).toISOString()} (${formatAge(nowMs - since)})`;
    }
    case 'RETRYING': {
      const next = Date.parse(c.nextAttemptAt ?? '');
      const when = Number.isNaN(next) ? '' : `, next try in ${formatAge(Math.max(0, next - nowMs))}`;
      return `retrying ${to}: attempt ${c.attempt ?? 0}${when}; last error: ${c.lastError || 'none'}`;
    }
    case 'CONNECTING':
      return `connecting to ${to}${c.attempt ? ` (attempt ${c.attempt + 1}; last error: ${c.lastError || 'none'})` : ''}`;
    case 'STARTING':
      return `starting (recovering engines, reading the hardware); will connect to ${to}`;
    case 'STOPPED':
      return `stopped (the agent is shutting down); was ${to}`;
    default:
      return `${state.toLowerCase()} ${to}`;
  }
}

/** The client certificate and CA the last (re)connection used; one that expires within tls.expiry_warning says so. */
export function describeTls(t: ControlPlaneTlsJson, nowMs: number): string {
  const ca = `ca ${t.ca || 'system trust store'}`;
  if (!t.certPath) return `no client certificate; ${ca}`;
  const notAfter = Date.parse(t.certNotAfter ?? '');
  let until = '';
  if (!Number.isNaN(notAfter)) {
    const leftMs = notAfter - nowMs;
    const mark = leftMs <= 0 ? ` (EXPIRED ${formatAge(-leftMs)} ago)` : t.certExpiresSoon ? ` (expires in ${formatAge(leftMs)})` : '';
    until = `, valid until ${new Date(notAfter).toISOString()}${mark}`;
  }
  // The fingerprint docs/security.md promises: what `openssl x509 -noout -fingerprint -sha256` prints, to match a file or an issuer's record.
  const sha = t.certFingerprintSha256 ? `, sha256 ${t.certFingerprintSha256}` : '';
  return `cert ${t.certPath} (${t.certSubject || '?'})${until}${sha}; ${ca}`;
}

export function describeInventory(inv: InventoryJson): string {
  const gpus = inv.gpus ?? [];
  const names = new Map<string, number>();
  for (const g of gpus) names.set(g.name || 'unknown GPU', (names.get(g.name || 'unknown GPU') ?? 0) + 1);
  const unhealthy = gpus.filter((g) => !g.healthy).length;
  const parts = [
    gpus.length === 0 ? 'no GPUs' : `${gpus.length} GPUs (${[...names].map(([n, k]) => `${k} × ${n}`).join(', ')})${unhealthy ? `, ${unhealthy} unhealthy` : ''}`,
    inv.driverVersion ? `driver ${inv.driverVersion}${inv.cudaVersion ? `, CUDA ${inv.cudaVersion}` : ''}` : 'no NVIDIA driver',
  ];
  const hcas = inv.hcas ?? [];
  if (hcas.length > 0) {
    const active = hcas.filter((h) => h.state === 'ACTIVE').length;
    parts.push(`${hcas.length} HCA ports (${active} active)`);
  }
  return parts.join('; ');
}

function shardRow(sh: ShardInfoJson, nowMs: number): string[] {
  const started = Date.parse(sh.startedAt ?? '');
  return [
    sh.shardId ?? '?',
    sh.replicaId || '-',
    sh.engine || '-',
    sh.model || '-',
    enumLabel(sh.state, 'SHARD_STATE_'),
    sh.pid ? String(sh.pid) : '-',
    sh.httpPort ? String(sh.httpPort) : '-',
    (sh.gpuIndices ?? []).length > 0 ? (sh.gpuIndices ?? []).join(',') : '-',
    Number.isNaN(started) ? '-' : formatAge(nowMs - started),
    sh.adopted ? 'yes' : 'no',
    // The unit to give `systemctl status`; "(direct)" for an engine in a process group only.
    sh.unit || (sh.launcher ? `(${sh.launcher})` : '-'),
  ];
}
