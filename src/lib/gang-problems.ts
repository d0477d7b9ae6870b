import { isIP } from 'node:net';
import type { StartShard } from '../gen/llmgw/v1/agent_pb.js';
import { isValidShardId } from './shard-id.js';
import type { ShardFieldProblem } from './shard-field-problem.js';
import { firstUnprintable } from './printable.js';

/** Most ranks a gang may list: more nodes than any one replica spans. */
export const MAX_GANG_MEMBERS = 256;
const MAX_GANG_TEXT_BYTES = 256;
const HOSTNAME = /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$/;

/** `host:port` (`[v6]:port` for IPv6) split, or undefined when it is not one with a port of 1-65535. */
export function parseEndpoint(endpoint: string): { host: string; port: number } | undefined {
  const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(endpoint);
  if (!m) return undefined;
  const host = (m[1] ?? m[2]) as string;
  const port = Number(m[3]);
  if (port < 1 || port > 65535) return undefined;
  if (m[1] !== undefined ? isIP(host) !== 6 : isIP(host) === 0 && !HOSTNAME.test(host)) return undefined;
  return { host, port };
}

/**
 * What is wrong with a StartShard's gang (issue 40), in the order a refusal
 * names the first: set only on a multi-node shard; its id a shard id; exactly
 * nnodes members, rank i at place i; this shard named at its own rank; node
 * ids bounded and printable; shard ids valid; endpoints host:port; http ports
 * 0-65535. A gang is kept in the state file and polled by the agent: nothing
 * unbounded, nothing that names a file, no address that is not one.
 */
export function gangProblems(spec: StartShard): ShardFieldProblem[] {
  const gang = spec.gang;
  if (gang === undefined) return [];
  const problem = (field: string, message: string): ShardFieldProblem[] => [{ field, message }];
  if (spec.nnodes <= 1) return problem('gang', `gang is set on a shard of nnodes ${spec.nnodes}; only a multi-node shard (nnodes > 1) has one`);
  if (!isValidShardId(gang.gangId)) return problem('gang.gang_id', 'gang.gang_id is not 1-128 characters of A-Z a-z 0-9 . _ - starting with a letter or digit');
  if (gang.members.length !== spec.nnodes || gang.members.length > MAX_GANG_MEMBERS) {
    return problem('gang.members', `gang.members lists ${gang.members.length} ranks; a shard of nnodes ${spec.nnodes} needs exactly ${spec.nnodes}`);
  }
  for (const [i, m] of gang.members.entries()) {
    const field = `gang.members[${i}]`;
    if (m.rank !== i) return problem(`${field}.rank`, `${field}.rank is ${m.rank}; members are listed by rank, so it must be ${i}`);
    const bytes = Buffer.byteLength(m.nodeId);
    if (m.nodeId === '' || bytes > MAX_GANG_TEXT_BYTES || firstUnprintable(m.nodeId) !== undefined) {
      return problem(`${field}.node_id`, `${field}.node_id must be 1-${MAX_GANG_TEXT_BYTES} bytes of printable text`);
    }
    if (!isValidShardId(m.shardId)) return problem(`${field}.shard_id`, `${field}.shard_id is not a valid shard id`);
    if (m.agentEndpoint !== '' && (Buffer.byteLength(m.agentEndpoint) > MAX_GANG_TEXT_BYTES || parseEndpoint(m.agentEndpoint) === undefined)) {
      return problem(`${field}.agent_endpoint`, `${field}.agent_endpoint is not host:port (an IP address or hostname, a port of 1-65535)`);
    }
    if (!Number.isInteger(m.httpPort) || m.httpPort < 0 || m.httpPort > 65535) {
      return problem(`${field}.http_port`, `${field}.http_port is ${m.httpPort}; give the rank's http_port (1-65535), or 0 when unknown`);
    }
  }
  const own = gang.members[spec.rank];
  if (own?.shardId !== spec.shardId) {
    return problem('gang.members', `gang.members names ${own ? own.shardId : 'no shard'} at rank ${spec.rank}, not this shard ${spec.shardId}`);
  }
  return [];
}
