import { clone } from '@bufbuild/protobuf';
import { type Inventory, StartShardSchema } from '../gen/llmgw/v1/agent_pb.js';
import { failure } from '../lib/errors.js';
import { foreignMemoryProblem } from '../lib/foreign-memory-problem.js';
import type { Logger } from '../lib/logger.js';
import { readEphemeralPortRange } from '../lib/ephemeral-port-range.js';
import { readProcStat } from '../lib/process/proc-stat.js';
import { isRunningStat } from '../lib/process/process-identity.js';
import type { CheckedStartShard } from '../lib/shard-id.js';
import { isTerminal } from '../lib/shard-states.js';
import { WORKER_PORT_FIRST, WORKER_PORT_LAST, chooseWorkerPort } from './engines/choose-worker-port.js';
import type { LaunchPlan, ValidationContext } from './engines/engine.js';
import type { EngineRegistry } from './engines/engine-registry.js';
import { isPortFree } from './engines/is-port-free.js';
import { isHubOffline } from '../models/engine-cache-env.js';
import type { NodeModels } from './models/node-models.js';
import type { ShardLaunch } from './supervisor/launch/launch-shard.js';
import type { Supervisor } from './supervisor/supervisor.js';

export interface StartAdmissionOptions {
  supervisor: Supervisor;
  engines: EngineRegistry;
  /** The node's hardware as last read: what a shard is judged against. */
  inventory: () => Inventory;
  /** The fault of a GPU ("GPU 3: Xid 79: ..."), from the health watch; undefined when it is sound. */
  gpuFault?: (gpuIndex: number) => string | undefined;
  /** discovery.foreign_memory_share: a GPU with more memory used by no listed process is refused. */
  foreignMemoryShare?: number;
  /**
   * Why this node takes no new shard at all, whatever the shard: its
   * conditions (cordoned, disk pressure), first that holds; undefined when
   * none does (node-conditions.ts).
   */
  nodeRefusal?: () => string | undefined;
  /** The node's model store: a start waits for a pull of its model, and pins it before launch. */
  models?: NodeModels;
  /**
   * Whether a compute process the inventory lists has ended since it was
   * listed (GpuProcessSightings.gone); by default, whether /proc has it.
   */
  processGone?: (pid: number) => boolean;
  /** Last before the launch, after the plan: what must hold before the engine binds its port (a sleep-mode port's guard); throws the refusal. */
  beforeLaunch?: (spec: CheckedStartShard, plan: LaunchPlan) => Promise<void>;
  /** The shard's LoRA adapters (agent-adapters.ts): why its set or limits may not be, and the flags and environment they need at launch. */
  adapters?: {
    startProblem(spec: CheckedStartShard): string | undefined;
    launch(spec: CheckedStartShard): { args: string[]; env: Record<string, string> } | undefined;
  };
  logger: Logger;
}

/** A start admitted so far: the spec the registry reserves, and the launch it runs once it has. */
export interface AdmittedStart {
  spec: CheckedStartShard;
  /** Validates against the node and the engine's config, then plans the command; throws the refusal. */
  launch: () => Promise<ShardLaunch>;
}

/**
 * Whether a StartShard may run on this node, and how: the one room where a
 * start is judged. admit() judges what must be known before the registry
 * reserves the shard's GPUs and port (faulty or foreign-held GPUs, a port
 * for a worker rank given none); the launch it returns judges the rest
 * (the engine's validation: profile, args, env, executable, GPUs held,
 * ports) after the reservation, so that a repeat of the start never
 * validates beside it, and plans the command. Every refusal is a thrown
 * LlmgwError with one line naming the cause; the caller only reports it.
 */
export class StartAdmission {
  constructor(private readonly opts: StartAdmissionOptions) {}

  async admit(given: CheckedStartShard): Promise<AdmittedStart> {
    // A repeat of a shard already here is not judged: the registry reports
    // its state, whatever its GPU does now.
    const known = this.opts.supervisor.get(given.shardId);
    if (known && !isTerminal(known.state)) return { spec: given, launch: () => this.plan(given) };
    // Before the GPUs: a cordoned node or a full disk refuses every shard,
    // and naming a GPU would send the operator to the wrong place.
    const refusal = this.opts.nodeRefusal?.();
    if (refusal !== undefined) throw failure(refusal);
    // The spec alone, before any GPU or pull: a bad adapter set is refused whole, nothing launched.
    const adapters = this.opts.adapters?.startProblem(given);
    if (adapters !== undefined) throw failure(`shard ${given.shardId}: ${adapters}`);
    this.refuseUnfitGpus(given);
    await this.waitForModelPull(given);
    const spec = await this.withWorkerPort(given);
    return { spec, launch: () => this.plan(spec) };
  }

  /**
   * GPUs no engine should be put on, whatever the engine: one with a fault
   * (checked before the registry's "held by", which would name the shard and
   * hide the cause), and one whose memory is used by something this node
   * cannot see (the engine would run out of memory minutes into loading).
   */
  private refuseUnfitGpus(spec: CheckedStartShard): void {
    const inventory = this.opts.inventory();
    for (const i of spec.gpuIndices) {
      const fault = this.opts.gpuFault?.(i);
      if (fault !== undefined) throw failure(`${fault}; no shard starts on it until the fault clears (a lost GPU needs a reset)`);
      const gpu = inventory.gpus.find((g) => g.index === i);
      const foreign = gpu && foreignMemoryProblem(gpu, inventory.processes, this.opts.foreignMemoryShare);
      if (foreign) throw failure(foreign);
    }
  }

  /**
   * The spec with a port for a worker rank that listens and was given none
   * (chooseWorkerPort); the spec itself otherwise. Chosen before the start
   * is reserved, so the registry reserves it; a start racing this one for
   * the same port is refused by that reservation and retried by its
   * control plane.
   */
  private async withWorkerPort(spec: CheckedStartShard): Promise<CheckedStartShard> {
    if (spec.httpPort !== 0) return spec;
    const engine = this.opts.engines.get(spec.profile?.engine ?? '');
    if (!engine.workerListens(spec)) return spec;
    const held = this.opts.supervisor.reservations(spec.shardId).ports;
    const port = await chooseWorkerPort(held, isPortFree, await readEphemeralPortRange());
    if (port === undefined) throw failure(`no free port in ${WORKER_PORT_FIRST}-${WORKER_PORT_LAST} for worker rank ${spec.rank}'s /health; give the shard an http_port`);
    this.opts.logger.info({ shard: spec.shardId, replica: spec.replicaId, port }, 'chose a port for a worker rank\'s /health');
    const chosen = clone(StartShardSchema, spec) as CheckedStartShard;
    chosen.httpPort = port;
    return chosen;
  }

  /**
   * A start of a model being pulled into the node's store waits for the pull
   * (NodeModels.waitForPull, bounded by the shard's startup_timeout) rather
   * than have its engine download the same files beside it. Before the
   * reservation: a wait of minutes must hold no launch slot, which would
   * stall every other start.
   */
  private async waitForModelPull(spec: CheckedStartShard): Promise<void> {
    await this.opts.models?.waitForPull(spec);
  }

  /** Validation before launching: an engine that refuses a profile does so after minutes of model loading; here it costs nothing. */
  private async plan(spec: CheckedStartShard): Promise<ShardLaunch> {
    const engine = this.opts.engines.get(spec.profile?.engine ?? '');
    // Pinned before validate() judges the model complete (and so offline): nothing evicts it between that and the engine reading it.
    await this.opts.models?.pin(spec);
    try {
      await engine.validate(spec, this.validationContext(spec));
      const plan = engine.command(spec);
      const lora = this.opts.adapters?.launch(spec);
      if (lora) {
        plan.argv.push(...lora.args);
        Object.assign(plan.env, lora.env);
      }
      refuseWithoutHub(spec, engine.storeShortfall?.(spec), plan.env);
      await this.opts.beforeLaunch?.(spec, plan);
      // ctl status's note: how it runs online, and where a multi-node rank is placed (rank-placement.ts).
      const note = [this.onlineNote(spec, engine.onlineReason?.(spec), plan.env), plan.placement ? `placed: ${plan.placement.why}` : undefined].filter((n) => n !== undefined).join('; ');
      // Said at every such start: what the engine's wing wants the operator to know of this plan (vLLM's keyless dev endpoints).
      for (const warning of engine.startWarnings?.(plan) ?? []) this.opts.logger.warn({ shard: spec.shardId, replica: spec.replicaId, port: spec.httpPort }, warning);
      // Offline from the store: its blobs checked against what was verified, and the model's identity by content (issue 51).
      const modelDigest = isHubOffline(plan.env) ? await this.opts.models?.verifyForStart(spec) : undefined;
      return { plan, servesHttp: engine.servesHttp(spec), watch: engine.watch(spec, plan), ...(note ? { note } : {}), ...(modelDigest ? { modelDigest } : {}) };
    } catch (err) {
      // Refused: no engine of this shard reads the model.
      if (!this.opts.supervisor.get(spec.shardId)) await this.opts.models?.unpin(spec.shardId);
      throw err;
    }
  }

  /**
   * A start the node's model store cannot serve whole runs online (its
   * engine may fetch from the hub); ctl status shows why in the shard's
   * note, and the log says it. None when it runs offline, when there is no
   * store, or when the operator's engine env sets HF_HUB_OFFLINE itself.
   */
  private onlineNote(spec: CheckedStartShard, reason: string | undefined, env: Record<string, string>): string | undefined {
    if (reason === undefined || isHubOffline(env)) return undefined;
    this.opts.logger.info({ shard: spec.shardId, replica: spec.replicaId, why: reason }, "the engine starts online: not everything it reads at start is in the node's model store");
    return `started online (HF_HUB_OFFLINE unset): ${reason}`;
  }

  private validationContext(spec: CheckedStartShard): ValidationContext {
    const sup = this.opts.supervisor;
    const inventory = this.opts.inventory();
    // The registry's reservations, the same ones its synchronous reserve()
    // step refused against: a second list built here from snapshots would
    // miss the launches still in progress.
    const heldGpus = sup.reservations(spec.shardId).gpus;
    const holding = sup.list().filter((s) => !isTerminal(s.state) || s.running);
    const shardGroups = new Set(holding.map((s) => s.pid));
    // The inventory is up to discovery.interval old: a start right after a
    // STOPPED found the stopped engine listed there, in no live shard's
    // group, and was refused its GPU for a minute (issue 36, item 7). A
    // process that has ended since the scan holds nothing, whoever ran it.
    const gone = this.opts.processGone ?? ((pid: number) => !isRunningStat(readProcStat(pid)));
    // A compute process is ours when it is in the process group of one of our
    // engines (the GPU is usually held by a worker child, not the pid we started).
    const foreignProcesses = inventory.processes.filter((p) => {
      if (gone(p.pid)) return false;
      const stat = readProcStat(p.pid);
      return !(stat && shardGroups.has(stat.pgrp)) && !shardGroups.has(p.pid);
    });
    return { inventory, heldGpus, foreignProcesses, isPortFree: (port) => isPortFree(port), agentUid: process.getuid?.() ?? -1 };
  }
}

/**
 * A node without a hub is one whose engine environment sets HF_HUB_OFFLINE
 * (engines.<name>.env, or a profile's env where allowed): the operator's own
 * word for an air-gapped node, the one huggingface_hub obeys. There a start
 * the store cannot serve whole is refused now, naming what is missing,
 * rather than started: offline, the engine fails at the first file its
 * empty per-engine cache lacks, after minutes of loading (issue 51).
 */
function refuseWithoutHub(spec: CheckedStartShard, shortfall: { reason: string; repos: string[] } | undefined, env: Record<string, string>): void {
  if (shortfall === undefined || !isHubOffline(env)) return;
  // Every repo short, a tokenizer or draft repo too: the operator pulls them all before the one retry.
  const pulls = shortfall.repos.map((r) => `llmgw models pull ${r}`).join('; ');
  throw failure(`shard ${spec.shardId}: the node has no hub (HF_HUB_OFFLINE=${env.HF_HUB_OFFLINE} in the engine's environment) and ${shortfall.reason}; pull what is missing (${pulls}) and start it again`);
}
