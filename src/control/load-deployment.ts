import { readFileSync } from 'node:fs';
import { LineCounter, isMap, isScalar, isSeq, parseDocument, type Node, type YAMLMap } from 'yaml';
import { parseDuration } from '../lib/duration.js';
import { describeValue } from '../lib/describe-value.js';
import { describeErrno } from '../lib/errno.js';
import { configError } from '../lib/errors.js';
import { dataParallelRanks } from '../lib/engine-gpu-count.js';
import { ENGINE_NAMES, isEngineName } from '../lib/engine-names.js';
import { nearestName } from '../lib/nearest-name.js';
import {
  DEFAULT_STARTUP_TIMEOUT_MS,
  PREFETCH_RUNGS,
  type PrefetchRung,
  type Deployment,
  type DeploymentProfile,
  type DeploymentReplica,
} from './deployment.js';

/**
 * Replica ids become part of shard ids (`<id>-g<generation>-r<rank>`), which
 * name files on the agent, so they share the shard id alphabet with room left
 * for the suffix inside its 128 characters.
 */
export const REPLICA_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;

const PROFILE_KEYS = [
  'engine',
  'model',
  'served_model_name',
  'tensor_parallel_size',
  'pipeline_parallel_size',
  'args',
  'env',
  'startup_timeout',
  'min_compute_capability',
  'sleep_mode',
  'prefetch',
] as const;
const REPLICA_KEYS = ['name', 'profile', 'count', 'ids', 'gpus_per_shard', 'nnodes', 'pool', 'fabric'] as const;
const TOP_KEYS = ['profiles', 'replicas'] as const;

/**
 * Reads a deployment file. Every problem is a configuration error (exit 78)
 * in one line that names the key and `file:line`, so an operator fixes it
 * without reading code.
 */
export function loadDeployment(path: string): Deployment {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw configError(`cannot read deployment ${path}: ${describeErrno(err)}`, { cause: err });
  }
  return parseDeployment(text, path);
}

/** Parses deployment YAML; `path` is only used in error messages. */
export function parseDeployment(text: string, path: string): Deployment {
  const lc = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lc, uniqueKeys: true, prettyErrors: false });
  const first = doc.errors[0];
  if (first) {
    const line = first.linePos?.[0]?.line ?? lc.linePos(first.pos[0]).line;
    throw configError(`cannot parse deployment ${path}:${line}: ${first.message.split('\n')[0]}`);
  }
  const lineOf = (node: Node | null | undefined, fallback = 1): number =>
    node?.range ? lc.linePos(node.range[0]).line : fallback;
  const bad = (key: string, problem: string, node: Node | null | undefined, line?: number) =>
    configError(`${key}: ${problem} (${path}:${line ?? lineOf(node)})`);

  const root = doc.contents;
  if (!isMap(root)) {
    throw configError(`deployment ${path} must be a map with profiles and replicas (${path}:${lineOf(root)})`);
  }
  const top = entries(root, '', TOP_KEYS, bad, lineOf);

  const profilesNode = top.get('profiles');
  if (!profilesNode || !isMap(profilesNode.value)) {
    throw bad('profiles', 'must be a map from profile name to engine settings', profilesNode?.value, profilesNode?.line ?? 1);
  }
  const profiles = new Map<string, DeploymentProfile>();
  for (const pair of profilesNode.value.items) {
    const keyNode = pair.key as Node;
    const name = isScalar(keyNode) ? String(keyNode.value) : '';
    const value = pair.value as Node | null;
    if (!isMap(value)) throw bad(`profiles.${name}`, 'must be a map of engine settings', value, lineOf(keyNode));
    profiles.set(name, readProfile(name, value, lineOf(keyNode), bad, lineOf));
  }

  const replicasNode = top.get('replicas');
  if (!replicasNode || !isSeq(replicasNode.value)) {
    throw bad('replicas', 'must be a list of replica groups ({name, profile, count, gpus_per_shard, nnodes})', replicasNode?.value, replicasNode?.line ?? 1);
  }
  const replicas: DeploymentReplica[] = [];
  const seen = new Map<string, string>();
  replicasNode.value.items.forEach((item, i) => {
    const node = item as Node;
    if (!isMap(node)) throw bad(`replicas[${i}]`, 'must be a map ({name, profile, ...})', node);
    for (const r of readReplicaGroup(`replicas[${i}]`, node, profiles, bad, lineOf)) {
      const other = seen.get(r.id);
      if (other) throw bad(`replicas[${i}]`, `replica id ${r.id} is already used by ${other}`, node);
      seen.set(r.id, `replicas[${i}]`);
      replicas.push(r);
    }
  });
  return { path, profiles, replicas };
}

type Bad = (key: string, problem: string, node: Node | null | undefined, line?: number) => Error;
type LineOf = (node: Node | null | undefined, fallback?: number) => number;
interface Entry {
  value: Node | null;
  line: number;
}

/** The entries of a map, refusing keys it does not know with a "did you mean". */
function entries(map: YAMLMap, prefix: string, known: readonly string[], bad: Bad, lineOf: LineOf): Map<string, Entry> {
  const out = new Map<string, Entry>();
  for (const pair of map.items) {
    const keyNode = pair.key as Node;
    const name = isScalar(keyNode) ? String(keyNode.value) : String(keyNode);
    const line = lineOf(keyNode);
    if (!known.includes(name)) {
      const guess = nearestName(name, known);
      throw bad(`${prefix}${name}`, `unknown key${guess ? `; did you mean ${guess}?` : `; known keys: ${known.join(', ')}`}`, keyNode, line);
    }
    out.set(name, { value: pair.value as Node | null, line });
  }
  return out;
}

function scalarValue(e: Entry | undefined): unknown {
  if (!e || e.value === null) return undefined;
  return isScalar(e.value) ? e.value.value : e.value.toJSON();
}

function readString(e: Entry | undefined, key: string, bad: Bad, required: boolean): string | undefined {
  const v = scalarValue(e);
  if (v === undefined || v === null || v === '') {
    if (required) throw bad(key, 'is required', e?.value, e?.line);
    return undefined;
  }
  if (typeof v === 'string') return v;
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  throw bad(key, `must be a string, got ${describeValue(v)}`, e?.value, e?.line);
}

function readInt(e: Entry | undefined, key: string, bad: Bad, min: number, fallback: number): number {
  const v = scalarValue(e);
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min) {
    throw bad(key, `must be a whole number of at least ${min}, got ${describeValue(v)}`, e?.value, e?.line);
  }
  return v;
}

function readProfile(name: string, map: YAMLMap, line: number, bad: Bad, lineOf: LineOf): DeploymentProfile {
  const p = `profiles.${name}.`;
  if (!REPLICA_ID_PATTERN.test(name)) {
    throw bad(`profiles.${name}`, 'profile names use A-Z a-z 0-9 . _ - and start with a letter or digit', map, line);
  }
  const e = entries(map, p, PROFILE_KEYS, bad, lineOf);
  const engine = readString(e.get('engine'), `${p}engine`, bad, true) as string;
  if (!isEngineName(engine)) {
    const guess = nearestName(engine, ENGINE_NAMES);
    throw bad(`${p}engine`, `unknown engine ${JSON.stringify(engine)}${guess ? `; did you mean ${guess}?` : `; known engines: ${ENGINE_NAMES.join(', ')}`}`, e.get('engine')?.value);
  }
  const model = readString(e.get('model'), `${p}model`, bad, true) as string;

  const argsEntry = e.get('args');
  const args = scalarValue(argsEntry) ?? [];
  if (!Array.isArray(args) || !args.every((a) => typeof a === 'string' || typeof a === 'number')) {
    throw bad(`${p}args`, `must be a list of strings (argv, never a shell string), got ${describeValue(args)}`, argsEntry?.value, argsEntry?.line);
  }
  const envEntry = e.get('env');
  const env = scalarValue(envEntry) ?? {};
  if (typeof env !== 'object' || env === null || Array.isArray(env)) {
    throw bad(`${p}env`, `must be a map of strings, got ${describeValue(env)}`, envEntry?.value, envEntry?.line);
  }

  const timeoutEntry = e.get('startup_timeout');
  let startupTimeoutMs = DEFAULT_STARTUP_TIMEOUT_MS;
  const timeoutValue = scalarValue(timeoutEntry);
  if (timeoutValue !== undefined) {
    const ms = typeof timeoutValue === 'string' ? parseDuration(timeoutValue) : undefined;
    if (ms === undefined || ms <= 0) {
      throw bad(`${p}startup_timeout`, `${describeValue(timeoutValue)} is not a duration; write it like 90s or 10m`, timeoutEntry?.value, timeoutEntry?.line);
    }
    startupTimeoutMs = ms;
  }

  // YAML reads 8.0 as the number 8; the wire wants "8.0".
  const ccEntry = e.get('min_compute_capability');
  const ccValue = scalarValue(ccEntry);
  let minComputeCapability = '';
  if (ccValue !== undefined && ccValue !== '') {
    minComputeCapability = typeof ccValue === 'number' ? ccValue.toFixed(1) : String(ccValue);
    if (!/^\d+\.\d+$/.test(minComputeCapability)) {
      throw bad(`${p}min_compute_capability`, `must be major.minor such as "8.0", got ${describeValue(ccValue)}`, ccEntry?.value, ccEntry?.line);
    }
  }

  const sleepEntry = e.get('sleep_mode');
  const sleepValue = scalarValue(sleepEntry) ?? false;
  if (typeof sleepValue !== 'boolean') throw bad(`${p}sleep_mode`, `must be true or false, got ${describeValue(sleepValue)}`, sleepEntry?.value, sleepEntry?.line);
  const prefetchEntry = e.get('prefetch');
  const prefetch = scalarValue(prefetchEntry) ?? 'none';
  if (typeof prefetch !== 'string' || !(PREFETCH_RUNGS as readonly string[]).includes(prefetch)) {
    throw bad(`${p}prefetch`, `must be one of ${PREFETCH_RUNGS.join(', ')}, got ${describeValue(prefetch)}`, prefetchEntry?.value, prefetchEntry?.line);
  }
  if (prefetch !== 'none' && engine === 'sim') throw bad(`${p}prefetch`, 'the sim engine reads no model: nothing to prefetch; remove prefetch or use vllm or sglang', prefetchEntry?.value, prefetchEntry?.line);

  return {
    name,
    engine,
    model,
    sleepMode: sleepValue,
    prefetch: prefetch as PrefetchRung,
    servedModelName: readString(e.get('served_model_name'), `${p}served_model_name`, bad, false) ?? model,
    tensorParallelSize: readInt(e.get('tensor_parallel_size'), `${p}tensor_parallel_size`, bad, 1, 1),
    pipelineParallelSize: readInt(e.get('pipeline_parallel_size'), `${p}pipeline_parallel_size`, bad, 1, 1),
    args: args.map(String),
    env: Object.fromEntries(Object.entries(env).map(([k, v]) => [k, String(v)])),
    startupTimeoutMs,
    minComputeCapability,
  };
}

function readReplicaGroup(
  key: string,
  map: YAMLMap,
  profiles: ReadonlyMap<string, DeploymentProfile>,
  bad: Bad,
  lineOf: LineOf,
): DeploymentReplica[] {
  const e = entries(map, `${key}.`, REPLICA_KEYS, bad, lineOf);
  const name = readString(e.get('name'), `${key}.name`, bad, true) as string;
  if (!REPLICA_ID_PATTERN.test(name)) {
    throw bad(`${key}.name`, `${JSON.stringify(name)} is not a valid name: use up to 100 of A-Z a-z 0-9 . _ - starting with a letter or digit`, e.get('name')?.value);
  }
  const k = `replicas.${name}`;
  const profileName = readString(e.get('profile'), `${k}.profile`, bad, true) as string;
  const profile = profiles.get(profileName);
  if (!profile) {
    const guess = nearestName(profileName, profiles.keys());
    throw bad(`${k}.profile`, `unknown profile ${JSON.stringify(profileName)}${guess ? `; did you mean ${guess}?` : `; profiles: ${[...profiles.keys()].join(', ')}`}`, e.get('profile')?.value);
  }
  const nnodes = readInt(e.get('nnodes'), `${k}.nnodes`, bad, 1, 1);
  // A profile's DP ranks (vLLM's) each hold tp × pp GPUs, as the agent counts them (validate-shard.ts).
  const dp = dataParallelRanks(profile.engine, profile.args);
  const gpusTotal = profile.tensorParallelSize * profile.pipelineParallelSize * dp;
  const gpusEntry = e.get('gpus_per_shard');
  const gpusPerShard = readInt(gpusEntry, `${k}.gpus_per_shard`, bad, 0, Math.max(1, Math.ceil(gpusTotal / nnodes)));
  // The engines refuse a shard whose GPUs do not add up to tp x pp; saying so
  // here beats every agent refusing it after placement.
  if (gpusPerShard > 0 && gpusPerShard * nnodes !== gpusTotal) {
    throw bad(
      `${k}.gpus_per_shard`,
      `${gpusPerShard} GPUs on each of ${nnodes} node(s) is ${gpusPerShard * nnodes}, but profile ${profile.name} needs tensor_parallel_size x pipeline_parallel_size${dp > 1 ? ' x --data-parallel-size' : ''} = ${gpusTotal}`,
      gpusEntry?.value ?? map,
      gpusEntry?.line,
    );
  }

  const countEntry = e.get('count');
  const idsEntry = e.get('ids');
  let ids: string[];
  if (idsEntry && countEntry) throw bad(`${k}.ids`, 'give either count or ids, not both', idsEntry.value, idsEntry.line);
  if (idsEntry) {
    const v = scalarValue(idsEntry);
    if (!Array.isArray(v) || v.length === 0 || !v.every((x) => typeof x === 'string' && REPLICA_ID_PATTERN.test(x))) {
      throw bad(`${k}.ids`, 'must be a non-empty list of replica ids (A-Z a-z 0-9 . _ -, up to 100 characters)', idsEntry.value, idsEntry.line);
    }
    ids = v as string[];
  } else {
    const count = readInt(countEntry, `${k}.count`, bad, 0, 1);
    ids = Array.from({ length: count }, (_, i) => `${name}-${i}`);
  }
  const pool = readString(e.get('pool'), `${k}.pool`, bad, false) ?? '';
  const fabric = readString(e.get('fabric'), `${k}.fabric`, bad, false) ?? '';
  return ids.map((id) => ({ id, group: name, profile, gpusPerShard, nnodes, pool, fabric }));
}
