import { isIP } from 'node:net';
import type { Hca, StartShard } from '../gen/llmgw/v1/agent_pb.js';
import { gangProblems } from './gang-problems.js';
import type { ShardFieldProblem } from './shard-field-problem.js';
import { firstUnprintable } from './printable.js';

/**
 * Longest name-like field of a StartShard (replica id, pool, fabric, a
 * profile's names, an HCA, leader_addr). The spec is kept whole in the
 * state file and echoed in every Register: a 12 MiB pool once made every
 * later Register larger than a gRPC control plane takes (4 MiB), and the
 * node never registered again (security review 2, finding N6).
 */
export const MAX_NAME_FIELD_BYTES = 256;
/** A model is a hub id or a local path: PATH_MAX. */
export const MAX_MODEL_BYTES = 4096;

/**
 * Most HCA entries a shard may list when the node's HCAs are not known (a
 * state file is read before discovery): more ports than any node has. Where
 * they are known, the node's port count is the bound.
 */
export const MAX_HCA_ENTRIES = 64;

/** A DNS name as RFC 1123 spells one, or the caller checks for an IP first. */
const HOSTNAME = /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$/;
/** An HCA as NCCL_IB_HCA takes one name: the device, then its port. Anything else is NCCL's selector language (",", "^", "="). */
const HCA_ENTRY = /^([A-Za-z0-9_.-]+)(?::(\d{1,3}))?$/;


/** Why `text` may not be field `field` (its size, then a control character), or undefined when it may. */
export function textFieldProblem(field: string, text: string, maxBytes = MAX_NAME_FIELD_BYTES): ShardFieldProblem | undefined {
  const bytes = Buffer.byteLength(text);
  if (bytes > maxBytes) return { field, message: `${field} is ${bytes} bytes; at most ${maxBytes} are accepted` };
  // Operators' terminals, the agent's log and ctl print these: a control
  // character in one would be an escape sequence there (review finding 11).
  const bad = firstUnprintable(text);
  if (bad !== undefined) return { field, message: `${field} contains the control character ${bad}; use printable text` };
  return undefined;
}

/** Whether `addr` is an IP address or a hostname; '' (none) is one. */
function isHostAddress(addr: string): boolean {
  return addr === '' || isIP(addr) !== 0 || HOSTNAME.test(addr);
}

/** The device an HCA entry names (`mlx5_0` of `mlx5_0:1`), or undefined when the entry is not one HCA. */
function hcaDeviceOf(entry: string): string | undefined {
  return HCA_ENTRY.exec(entry)?.[1];
}

/**
 * The fields of `spec` that no StartShard may carry, in the order a refusal
 * names the first: every name-like string bounded and printable, leader_addr
 * an IP or a hostname, `hcas` no longer than the node's HCA ports and each
 * entry one of them (`nodeHcas`, when the node's are known; else one HCA
 * name, at most MAX_HCA_ENTRIES). One rule for every way a spec comes in or
 * goes out: a StartShard (refused before anything is launched or written), a
 * state file an older agent wrote before the rule (its fields dropped on
 * reading) and Register's running shards (sent empty), so that what the
 * agent keeps and echoes is bounded by construction.
 */
export function shardFieldProblems(spec: StartShard, nodeHcas?: readonly Pick<Hca, 'name' | 'port'>[]): ShardFieldProblem[] {
  const profile = spec.profile;
  const problems: ShardFieldProblem[] = [];
  // Checked first and alone: a list of a million entries is one problem, not a million.
  const maxHcas = nodeHcas?.length ?? MAX_HCA_ENTRIES;
  const hcasFit = spec.hcas.length <= maxHcas;
  if (!hcasFit) {
    const limit = nodeHcas === undefined ? `at most ${maxHcas} are accepted` : `this node has ${maxHcas} HCA port${maxHcas === 1 ? '' : 's'}`;
    problems.push({ field: 'hcas', message: `hcas lists ${spec.hcas.length} entries; ${limit}` });
  }
  const texts: [string, string, number][] = [
    ['replica_id', spec.replicaId, MAX_NAME_FIELD_BYTES],
    ['profile.name', profile?.name ?? '', MAX_NAME_FIELD_BYTES],
    ['profile.model', profile?.model ?? '', MAX_MODEL_BYTES],
    ['profile.served_model_name', profile?.servedModelName ?? '', MAX_NAME_FIELD_BYTES],
    ['pool', spec.pool, MAX_NAME_FIELD_BYTES],
    ['fabric', spec.fabric, MAX_NAME_FIELD_BYTES],
    ['leader_addr', spec.leaderAddr, MAX_NAME_FIELD_BYTES],
    ...(hcasFit ? spec.hcas.map((h, i): [string, string, number] => [`hcas[${i}]`, h, MAX_NAME_FIELD_BYTES]) : []),
  ];
  const unfit = new Set<string>();
  for (const [field, text, maxBytes] of texts) {
    const p = textFieldProblem(field, text, maxBytes);
    if (p === undefined) continue;
    problems.push(p);
    unfit.add(field);
  }
  // Only what is bounded and printable is quoted from here on.
  if (!unfit.has('leader_addr') && !isHostAddress(spec.leaderAddr)) {
    problems.push({ field: 'leader_addr', message: `leader_addr ${JSON.stringify(spec.leaderAddr)} is neither an IP address nor a hostname` });
  }
  problems.push(...gangProblems(spec));
  if (!hcasFit) return problems;
  // NCCL_IB_HCA takes a selector language (",", "^", "=", ":port"): a name
  // that is not one of this node's HCAs changed which HCAs NCCL used (N6).
  const names = nodeHcas === undefined ? undefined : new Set(nodeHcas.map((h) => h.name));
  const ports = new Set(nodeHcas?.map((h) => `${h.name}:${h.port}`));
  spec.hcas.forEach((hca, i) => {
    if (unfit.has(`hcas[${i}]`)) return;
    const device = hcaDeviceOf(hca);
    if (names !== undefined) {
      if (device !== undefined && names.has(device) && (device === hca || ports.has(hca))) return;
      const known = [...names].join(', ') || 'none';
      problems.push({ field: `hcas[${i}]`, message: `hcas names ${JSON.stringify(hca)}, which is not an HCA of this node (HCAs: ${known})` });
    } else if (device === undefined) {
      problems.push({ field: `hcas[${i}]`, message: `hcas names ${JSON.stringify(hca)}, which is not an HCA name` });
    }
  });
  return problems;
}
