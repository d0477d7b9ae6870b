import type { AdoptResponseJson } from '../gen/llmgw/v1/admin_pb.js';
import { callUnaryJson } from './call-unary-json.js';

/** Asks the agent to rescan its state directory now; adopted shards are reported to the control plane by the agent. */
export function ctlAdopt(socket: string): Promise<AdoptResponseJson> {
  return callUnaryJson<AdoptResponseJson>(socket, 'Adopt', {});
}
