import type { StatusResponseJson } from '../gen/llmgw/v1/admin_pb.js';
import { callUnaryJson } from './call-unary-json.js';
import type { ShardFilter } from './filter-status-shards.js';

/** The agent's StatusResponse, as proto JSON (the form `--json` prints), with the shards `filter` asks for. */
export function ctlStatus(socket: string, filter: ShardFilter = {}): Promise<StatusResponseJson> {
  const req = { ...(filter.all ? { all: true } : {}), ...(filter.states?.length ? { states: filter.states } : {}) };
  return callUnaryJson<StatusResponseJson>(socket, 'Status', req);
}
