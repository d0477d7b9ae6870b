import { SHARD_STATES, stateName } from '../../lib/shard-states.js';
import { timestampDate, timestampMs } from '@bufbuild/protobuf/wkt';
import { ConnectionState, type ShardInfo, type StatusResponse } from '../../gen/llmgw/v1/admin_pb.js';
import { ShardState } from '../../gen/llmgw/v1/agent_pb.js';
import { bar, sparkline } from './sparkline.js';
import type { TopModel } from './top-model.js';

/** The orders `s` cycles through. */
export const SORT_KEYS = ['shard', 'state', 'age', 'gpu'] as const;
export type SortKey = (typeof SORT_KEYS)[number];

export interface TopView {
  sort: SortKey;
  /** Text a shard row must contain (id, model, engine, state), case-insensitive; '' shows all. */
  filter: string;
  /** Rows of the screen; 0 for a snapshot, which prints everything and no footer. */
  height: number;
  /** The filter being typed after `/`, shown in the footer; undefined when not typing. */
  typing?: string;
  width: number;
  nowMs: number;
}

const SPARK_WIDTH = 20;
const RATE_WIDTH = 7;
const BAR_WIDTH = 20;
/** Rows kept for the event pane when shards and GPUs leave room. */
const MIN_EVENT_ROWS = 3;

/** States that need an operator's eye first when sorting by state (the vocabulary's `attention`). */
const attention = (s: ShardState): number => SHARD_STATES[s]?.attention ?? 9;

const state = stateName;

/** "3s", "4m", "2h05m": an age that fits a column. */
export function formatAge(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

function clip(text: string, width: number): string {
  // Code points, not UTF-16 units: the bars and arrows are one cell each.
  const chars = [...text];
  return chars.length > width ? chars.slice(0, width).join('') : text;
}

function cell(text: string, width: number): string {
  return clip(text, width).padEnd(width);
}

function connectionLine(s: StatusResponse, nowMs: number): string {
  const c = s.connection;
  if (!c) return 'stream: unknown';
  const name = ConnectionState[c.state] ?? String(c.state);
  if (c.state === ConnectionState.CONNECTED && c.connectedSince) return `stream ${name} to ${c.server} for ${formatAge(nowMs - timestampMs(c.connectedSince))}`;
  if (c.state === ConnectionState.RETRYING) return `stream ${name} ${c.server} (attempt ${c.attempt}): ${c.lastError}`;
  return `stream ${name} ${c.server}`;
}

/** In flight as the agent last read it; '-' when it does not know (-1). */
export function formatInFlight(n: number): string {
  return n >= 0 ? String(n) : '-';
}

/** Tokens per second in a column of RATE_WIDTH: "3.5", "412", "12.3k"; '-' when unknown (-1). */
export function formatRate(tps: number): string {
  if (!(tps >= 0)) return '-';
  if (tps < 10) return tps.toFixed(1);
  if (tps < 100_000) return String(Math.round(tps));
  return `${(tps / 1000).toFixed(1)}k`;
}

function shardHealth(sh: ShardInfo, s: StatusResponse): string {
  const faulted = sh.gpuIndices.map((i) => s.gpus.find((g) => g.index === i)).find((g) => g && !g.healthy);
  if (faulted) return `GPU ${faulted.index} fault: ${faulted.fault}`;
  if (sh.error) return sh.error;
  return sh.state === ShardState.READY ? 'ok' : '-';
}

function sortShards(shards: ShardInfo[], key: SortKey): ShardInfo[] {
  const started = (sh: ShardInfo) => (sh.startedAt ? timestampMs(sh.startedAt) : 0);
  const by: Record<SortKey, (a: ShardInfo, b: ShardInfo) => number> = {
    shard: (a, b) => a.shardId.localeCompare(b.shardId),
    state: (a, b) => attention(a.state) - attention(b.state) || a.shardId.localeCompare(b.shardId),
    // Youngest first: what just started (or restarted) is what an operator watches.
    age: (a, b) => started(b) - started(a) || a.shardId.localeCompare(b.shardId),
    gpu: (a, b) => (a.gpuIndices[0] ?? 99) - (b.gpuIndices[0] ?? 99) || a.shardId.localeCompare(b.shardId),
  };
  return [...shards].sort(by[key]);
}

function matches(sh: ShardInfo, filter: string): boolean {
  if (filter === '') return true;
  const f = filter.toLowerCase();
  return [sh.shardId, sh.model, sh.engine, state(sh.state), sh.replicaId].some((t) => t.toLowerCase().includes(f));
}

/**
 * One frame of `ctl top`, as lines no wider than the terminal: a header
 * (node, agent, stream), the shards, the GPUs, then as many of the last
 * events as fit. Pure, so the snapshot printed without a TTY and the live
 * screen are the same text.
 */
export function renderTop(model: TopModel, v: TopView): string[] {
  const s = model.status;
  const out: string[] = [];
  const clock = new Date(v.nowMs).toISOString().slice(11, 19);
  if (!s) {
    out.push(`llmgw top  ${clock}`, model.statusError ? `cannot read the agent: ${model.statusError}` : 'waiting for the agent…');
    return out.map((l) => clip(l, v.width));
  }
  const up = s.startedAt ? formatAge(v.nowMs - timestampMs(s.startedAt)) : '-';
  out.push(`llmgw top  node ${s.nodeId}  agent ${s.version} up ${up}  ${connectionLine(s, v.nowMs)}  events ${model.eventsLive ? 'live' : 'off'}  ${clock}`);
  if (model.statusError) out.push(`! the last Status failed: ${model.statusError}`);

  const shards = sortShards(s.shards.filter((sh) => matches(sh, v.filter)), v.sort);
  const filterNote = v.filter ? `, filter "${v.filter}"` : '';
  out.push('', `SHARDS ${shards.length}/${s.shards.length} (sort: ${v.sort}${filterNote})`);
  out.push(
    `${cell('SHARD', 24)} ${cell('STATE', 10)} ${cell('AGE', 7)} ${cell('IN-FL', 5)} ${cell('TOK/S', RATE_WIDTH)} ${cell('TOK/S 60s', SPARK_WIDTH)} ${cell('GPUS', 6)} ${cell('MEMORY', BAR_WIDTH + 12)} HEALTH`,
  );
  for (const sh of shards) {
    const gpus = sh.gpuIndices.map((i) => s.gpus.find((g) => g.index === i));
    const used = gpus.reduce((sum, g) => sum + (g?.memoryUsedMb ?? 0), 0);
    const total = sh.gpuIndices.reduce((sum, i) => sum + (s.inventory?.gpus.find((g) => g.index === i)?.memoryTotalMb ?? 0), 0);
    const age = sh.startedAt ? formatAge(v.nowMs - timestampMs(sh.startedAt)) : '-';
    const memory = `${bar(used, total, BAR_WIDTH)} ${(used / 1024).toFixed(0)}/${(total / 1024).toFixed(0)}G`;
    // In flight and tokens/s are the agent's latest reading of the engine (its health watch's), not asked of the engine for this view.
    const load = `${cell(formatInFlight(sh.inFlight), 5)} ${cell(formatRate(sh.tokensPerSecond), RATE_WIDTH)} ${sparkline(model.tokensHistory(sh.shardId), SPARK_WIDTH)}`;
    out.push(
      `${cell(sh.shardId, 24)} ${cell(state(sh.state), 10)} ${cell(age, 7)} ${load} ${cell(sh.gpuIndices.join(','), 6)} ${cell(memory, BAR_WIDTH + 12)} ${shardHealth(sh, s)}`,
    );
  }

  out.push('', `GPUS ${s.gpus.length}`, `${cell('GPU', 4)} ${cell('MEMORY', BAR_WIDTH + 18)} ${cell('HEALTH', 9)} ${cell('FAULTS', 6)} LAST FAULT`);
  for (const g of s.gpus) {
    const total = s.inventory?.gpus.find((i) => i.index === g.index)?.memoryTotalMb ?? 0;
    const memory = `${bar(g.memoryUsedMb, total, BAR_WIDTH)} ${g.memoryUsedMb}/${total} MiB`;
    // As ctl status and llmgw_gpu_healthy say it: sound hardware the agent starts nothing on (foreign memory) is not "healthy".
    const health = !g.healthy ? 'FAULT' : g.fault ? 'UNUSABLE' : 'healthy';
    out.push(`${cell(String(g.index), 4)} ${cell(memory, BAR_WIDTH + 18)} ${cell(health, 9)} ${cell(String(model.faultCount(g.index)), 6)} ${g.fault}`);
  }

  const footer = v.typing !== undefined ? `filter: ${v.typing}▏ (Enter applies, Esc clears)` : 'q quit  s sort  / filter';
  const room = v.height > 0 ? Math.max(MIN_EVENT_ROWS, v.height - out.length - 4) : MIN_EVENT_ROWS * 4;
  out.push('', 'EVENTS');
  for (const e of model.events.slice(-room)) {
    const at = e.at ? timestampDate(e.at).toISOString().slice(11, 23) : '-';
    const subject = e.shardId !== '' ? e.shardId : e.gpu !== undefined ? `gpu ${e.gpu}` : '-';
    out.push(`${at}  ${cell(e.kind, 10)} ${cell(subject, 24)} ${e.message}`);
  }
  // A snapshot (height 0) has no screen to fill and no keys.
  if (v.height <= 0) return out.map((l) => clip(l, v.width));
  // The footer stays on the last row: cut or pad above it, so it neither scrolls away nor moves as events arrive.
  const body = out.slice(0, v.height - 1);
  while (body.length < v.height - 1) body.push('');
  body.push(footer);
  return body.map((l) => clip(l, v.width));
}
