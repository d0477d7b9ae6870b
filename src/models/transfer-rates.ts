import { create } from '@bufbuild/protobuf';
import { timestampFromMs } from '@bufbuild/protobuf/wkt';
import { type NodeTransferRates, NodeTransferRatesSchema, type TransferRate, TransferRateSchema } from '../gen/llmgw/v1/agent_pb.js';
import { readFileSync } from 'node:fs';
import { MIN_RATE_BYTES, type MeasuredRate, type NodeRates } from './modelled-warmth.js';

/** Inventory.rates from what the node measured (warmth-ledger.ts keeps them across restarts); undefined when nothing is measured yet. */
export function transferRates(rates: NodeRates): NodeTransferRates | undefined {
  const one = (r: MeasuredRate | undefined, source: string): TransferRate | undefined =>
    r === undefined || r.ms <= 0 ? undefined : create(TransferRateSchema, { bytesPerSecond: (r.bytes * 1000) / r.ms, bytes: BigInt(r.bytes), measuredAt: timestampFromMs(r.atMs), source });
  const out = create(NodeTransferRatesSchema, { diskWrite: one(rates.diskWrite, 'probe'), diskRead: one(rates.disk, 'warm'), lastPull: one(rates.hub, 'pull') });
  return out.diskWrite || out.diskRead || out.lastPull ? out : undefined;
}

/**
 * The rates an agent kept in its warmth file (`<state_dir>/warmth.json`,
 * warmth-ledger.ts), for `discover`, which runs beside the agent, not in
 * it: none when the file is missing, unreadable (the state dir is root's)
 * or not one; each rate checked as the ledger checks it.
 */
export function readTransferRates(warmthFile: string): NodeRates {
  let rates: Record<string, Partial<MeasuredRate>> | undefined;
  try {
    rates = (JSON.parse(readFileSync(warmthFile, 'utf8')) as { rates?: Record<string, Partial<MeasuredRate>> }).rates;
  } catch {
    return {};
  }
  const out: NodeRates = {};
  for (const kind of ['hub', 'disk', 'diskWrite'] as const) {
    const r = rates?.[kind];
    if (r && Number.isFinite(r.bytes) && Number.isFinite(r.ms) && Number(r.bytes) >= MIN_RATE_BYTES && Number(r.ms) > 0) out[kind] = { bytes: Number(r.bytes), ms: Number(r.ms), atMs: Number(r.atMs) || 0 };
  }
  return out;
}
