import type { StatusResponseJson } from '../gen/llmgw/v1/admin_pb.js';
import { callUnaryJson } from './call-unary-json.js';

/** The agent's StatusResponse, as proto JSON (the form `--json` prints). */
export function ctlStatus(socket: string): Promise<StatusResponseJson> {
  return callUnaryJson<StatusResponseJson>(socket, 'Status', {});
}
