import type { StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import { isInPortRange, readEphemeralPortRange } from '../../lib/ephemeral-port-range.js';
import { failure } from '../../lib/errors.js';
import { shardFieldProblems } from '../../lib/shard-field-problems.js';
import { type OwnedArgs, ownedArgIn } from './owned-args.js';
import { type CodeLoadingArgs, codeLoadingArgsIn } from './code-loading-args.js';
import { checkModelPath } from './check-model-path.js';
import { compareComputeCapability, parseComputeCapability } from './compare-compute-capability.js';
import type { ValidationContext } from './engine.js';
import { refuseProfileEnv } from '../config/env-allowlist.js';
import { resolveExecutable } from './resolve-executable.js';
import { parallelism, servesHttp } from './shard-launch.js';

export interface ValidateShardOptions {
  /** The engine's name in config, for messages: engines.<engine>.allowed_env. */
  engine: string;
  /** argv[0] the engine would run. */
  executable: string;
  /** What to change when it is not found, e.g. "set engines.vllm.command". */
  executableHint: string;
  /** Data-parallel ranks the profile asks for (vLLM); each holds tp × pp GPUs. Default 1. */
  dataParallelSize?: number;
  /** The file the ephemeral port range is read from; /proc's except in tests. */
  portRangePath?: string;
  /** engines.<engine>.allowed_env: the names a profile may set. */
  allowedEnv: readonly string[];
  /** A worker rank that listens on http_port too (SGLang's /health): its port is checked like an API rank's. */
  workerListens?: boolean;
  /** The flags the agent sets on this engine's command line, which profile args may not. */
  ownedArgs?: OwnedArgs;
  /** The engine's options that load code, open files or reach an endpoint, and those naming a model. */
  codeLoadingArgs?: CodeLoadingArgs;
  /** engines.<engine>.allowed_args: those of codeLoadingArgs a profile may set. */
  allowedArgs?: readonly string[];
  /** engines.<engine>.model_roots: where a local model may be. */
  modelRoots?: readonly string[];
  /** Whether profile.model must be a hub repo id or a path under modelRoots (not for the sim, which reads nothing of it). */
  checkModelPath?: boolean;
}

/** Longest profile env value: a token or a JSON blob fits; a megabyte of environment is an attack on execve's limits. */
export const MAX_PROFILE_ENV_VALUE_BYTES = 64 * 1024;

const validPort = (p: number) => Number.isInteger(p) && p >= 1 && p <= 65535;

/**
 * The checks every engine makes before launching, each refusing with one
 * line that names the problem. Ordered cheap to dear: the spec itself, then
 * this node's GPUs, then the file system, then the network. Returns the
 * absolute path of the executable, found with the agent's PATH: that path,
 * not the name, is what runs, so nothing in the engine's environment can
 * choose another binary.
 */
export async function validateShard(spec: StartShard, ctx: ValidationContext, opts: ValidateShardOptions): Promise<string> {
  const profile = spec.profile;
  if (spec.replicaId === '') throw failure(`shard ${spec.shardId}: replica_id is empty`);
  if (!profile) throw failure(`shard ${spec.shardId} has no profile`);
  if (profile.model === '') throw failure(`shard ${spec.shardId}: profile ${profile.name || '(unnamed)'} has no model`);
  // The model is the engine's first positional argument: one that begins
  // with "-" is read as a flag (a model named --help, N1).
  if (profile.model.startsWith('-')) throw failure(`shard ${spec.shardId}: profile.model ${JSON.stringify(profile.model.slice(0, 64))} begins with "-", which the engine would read as a flag`);
  const owned = opts.ownedArgs ? ownedArgIn(profile.args, opts.ownedArgs) : undefined;
  if (owned !== undefined) {
    throw failure(`shard ${spec.shardId}: profile args set ${owned}, which the agent sets itself (ports, served name, parallelism, drain, multi-node); remove it from the profile`);
  }
  const codeArgs = opts.codeLoadingArgs ? codeLoadingArgsIn(profile.args, opts.codeLoadingArgs, opts.allowedArgs ?? []) : [];
  const allowedKey = `engines.${opts.engine}.allowed_args`;
  const flagText = (h: { given: string; flag: string }) => (h.given === h.flag ? h.flag : `${h.given} (${h.flag})`);
  const refused = codeArgs.find((h) => h.kind === 'refused');
  if (refused) {
    throw failure(`shard ${spec.shardId}: profile args set ${flagText(refused)}, which loads code, opens files or reaches an endpoint on this node; list ${refused.flag} in ${allowedKey} to allow it`);
  }
  // One rule with the state file's reader (shardFieldProblems): the spec is
  // kept there and echoed in every Register, so what is refused here is what
  // a Register never carries (N6).
  const fieldProblem = shardFieldProblems(spec, ctx.inventory.hcas)[0];
  if (fieldProblem) throw failure(`shard ${spec.shardId}: ${fieldProblem.message}`);
  const seenHcas = new Set<string>();
  for (const hca of spec.hcas) {
    if (seenHcas.has(hca)) throw failure(`shard ${spec.shardId}: hcas lists ${hca} twice`);
    seenHcas.add(hca);
  }
  for (const [name, value] of Object.entries(profile.env)) {
    const why = refuseProfileEnv(name, opts.allowedEnv, opts.engine);
    if (why !== undefined) throw failure(`shard ${spec.shardId}: ${why}`);
    if (value.includes('\0')) throw failure(`shard ${spec.shardId}: profile env ${name} contains a NUL byte`);
    if (Buffer.byteLength(value) > MAX_PROFILE_ENV_VALUE_BYTES) {
      throw failure(`shard ${spec.shardId}: profile env ${name} is ${Buffer.byteLength(value)} bytes; at most ${MAX_PROFILE_ENV_VALUE_BYTES} are accepted`);
    }
  }

  // A local model is read as the engine's user from anywhere that user can
  // read; the operator says where models may be (N1). After the printable
  // check above: nothing unprintable is looked up on disk or echoed.
  const roots = opts.modelRoots ?? [];
  if (opts.checkModelPath) {
    const why = await checkModelPath(profile.model, roots, opts.engine);
    if (why !== undefined) throw failure(`shard ${spec.shardId}: profile.model ${JSON.stringify(profile.model)} ${why}`);
  }
  for (const h of codeArgs) {
    if (h.kind !== 'model-path' || h.value === undefined) continue;
    const why = await checkModelPath(h.value, roots, opts.engine);
    if (why !== undefined) throw failure(`shard ${spec.shardId}: profile args set ${flagText(h)} ${JSON.stringify(h.value)}, which ${why}, or list ${h.flag} in ${allowedKey}`);
  }

  const { tp, pp, nnodes } = parallelism(spec);
  if (nnodes > 1) {
    if (spec.leaderAddr === '') throw failure(`shard ${spec.shardId}: nnodes ${nnodes} requires leader_addr`);
    if (!validPort(spec.leaderPort)) throw failure(`shard ${spec.shardId}: leader_port ${spec.leaderPort} is not in 1..65535`);
    if (spec.rank < 0 || spec.rank >= nnodes) throw failure(`shard ${spec.shardId}: rank ${spec.rank} is not in [0, ${nnodes})`);
  } else if (spec.rank !== 0) {
    throw failure(`shard ${spec.shardId}: rank ${spec.rank} with nnodes ${spec.nnodes}; a single-node shard is rank 0`);
  }

  const gpus = spec.gpuIndices;
  if (gpus.length === 0) throw failure(`shard ${spec.shardId} lists no GPUs (gpu_indices is empty)`);
  const seen = new Set<number>();
  for (const i of gpus) {
    if (seen.has(i)) throw failure(`GPU ${i} is listed twice in gpu_indices [${gpus.join(', ')}]`);
    seen.add(i);
  }
  const dp = opts.dataParallelSize ?? 1;
  if (tp * pp * dp !== gpus.length * nnodes) {
    const dpText = dp === 1 ? '' : ` × data_parallel_size ${dp}`;
    throw failure(
      `tensor_parallel_size ${tp} × pipeline_parallel_size ${pp}${dpText} = ${tp * pp * dp} does not match ${gpus.length} GPUs × ${nnodes} node${nnodes === 1 ? '' : 's'} = ${gpus.length * nnodes}`,
    );
  }

  const minCc = profile.minComputeCapability;
  if (minCc !== '' && !parseComputeCapability(minCc)) {
    throw failure(`profile ${profile.name || '(unnamed)'}: min_compute_capability ${JSON.stringify(minCc)} is not major.minor, e.g. 8.0`);
  }
  const byIndex = new Map(ctx.inventory.gpus.map((g) => [g.index, g]));
  const known = ctx.inventory.gpus.map((g) => g.index).filter((i) => i >= 0);
  for (const i of gpus) {
    const gpu = byIndex.get(i);
    if (!gpu) throw failure(`GPU ${i} does not exist on this node (GPUs: ${known.length > 0 ? known.join(', ') : 'none'})`);
    const holder = ctx.heldGpus.get(i);
    if (holder !== undefined) throw failure(`GPU ${i} is held by shard ${holder}`);
    const squatter = ctx.foreignProcesses.find((p) => p.gpuUuid !== '' && p.gpuUuid === gpu.uuid);
    if (squatter) {
      throw failure(
        `GPU ${i} is in use by pid ${squatter.pid}${squatter.processName ? ` (${squatter.processName})` : ''}, which no shard owns; stop it first`,
      );
    }
    if (!gpu.healthy) throw failure(`GPU ${i} is unhealthy: ${gpu.error || 'unknown error'}`);
    if (minCc !== '') {
      if (gpu.computeCapability === '' || !parseComputeCapability(gpu.computeCapability)) {
        throw failure(`GPU ${i} compute capability is unknown (nvidia-smi too old to report it); the profile requires ${minCc}`);
      }
      if (compareComputeCapability(gpu.computeCapability, minCc) < 0) {
        throw failure(`GPU ${i} (${gpu.name}) has compute capability ${gpu.computeCapability}, below the profile's min_compute_capability ${minCc}`);
      }
    }
  }

  const executable = await resolveExecutable(opts.executable);
  if (executable === undefined) {
    const where = opts.executable.includes('/') ? 'is not an executable file' : "is not found on the agent's PATH";
    throw failure(`engine executable ${JSON.stringify(opts.executable)} ${where}; ${opts.executableHint}`);
  }

  // An outgoing connection (NCCL, a model download) can take a port in this
  // range between validation and the engine's bind (GPUStack issue 5181).
  const range = await readEphemeralPortRange(opts.portRangePath);
  const ephemeral = (what: string, port: number) =>
    failure(
      `${what} ${port} is inside this node's ephemeral port range ${range?.low}-${range?.high} (net.ipv4.ip_local_port_range), where an outgoing connection can take it; use a port outside it`,
    );
  if (servesHttp(spec) || opts.workerListens) {
    if (!validPort(spec.httpPort)) throw failure(`shard ${spec.shardId}: http_port ${spec.httpPort} is not in 1..65535`);
    if (range && isInPortRange(spec.httpPort, range)) throw ephemeral('port', spec.httpPort);
    if (!(await ctx.isPortFree(spec.httpPort))) throw failure(`http_port ${spec.httpPort} is already in use on this node`);
  }
  // Rank 0 of a multi-node shard binds the leader port itself (vLLM's master
  // or DP RPC port, SGLang's dist-init port).
  if (nnodes > 1 && spec.rank === 0 && range && isInPortRange(spec.leaderPort, range)) throw ephemeral('leader_port', spec.leaderPort);
  return executable;
}
