import { timestampDate } from '@bufbuild/protobuf/wkt';
import type { AgentEvent } from '../gen/llmgw/v1/admin_pb.js';

/** Columns wide enough for the kinds ("connection") and a typical shard id. */
const KIND_WIDTH = 10;
const SUBJECT_WIDTH = 22;

/**
 * One event as a line: time (UTC, ms), kind, what it concerns (a shard, a
 * GPU, or "-"), then the agent's sentence. Aligned so `ctl events -f`
 * reads as a column while new lines arrive.
 */
export function renderAgentEvent(e: AgentEvent): string {
  const at = e.at ? timestampDate(e.at).toISOString() : '-';
  const subject = e.shardId !== '' ? e.shardId : e.gpu !== undefined ? `gpu ${e.gpu}` : '-';
  return `${at}  ${e.kind.padEnd(KIND_WIDTH)}  ${subject.padEnd(SUBJECT_WIDTH)}  ${e.message}`;
}
