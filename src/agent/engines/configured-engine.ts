import { basename, isAbsolute, join } from 'node:path';
import type { EngineSleepApi } from '../../lib/engine-sleep-api.js';
import type { EngineWatch } from '../../lib/engine-watch.js';
import { engineApiKey } from './engine-api-key.js';
import { type CodeLoadingArgs, NO_CODE_LOADING_ARGS, hubReposIn } from './code-loading-args.js';
import { type EngineAccount, engineAccount, rootEngineRefusal } from './engine-account.js';
import { shardUser } from './shard-user.js';
import type { OwnedArgs } from './owned-args.js';
import type { EngineMetrics } from './engine-metrics.js';
import type { StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import { failure } from '../../lib/errors.js';
import type { EngineName } from '../../lib/engine-names.js';
import type { EngineConfig } from '../config/agent-config.js';
import { DEFAULT_ALLOWED_ENV, refuseProfileEnv } from '../config/env-allowlist.js';
import { chooseRankFabric, type RankFabric } from './rank-fabric.js';
import { chooseRankPlacement, type HostTopology, type RankPlacement, readHostTopology } from './rank-placement.js';
import type { Engine, LaunchPlan, ValidationContext } from './engine.js';
import { resolveExecutableSync } from './resolve-executable.js';
import { servesHttp, shardEnv } from './shard-launch.js';
import { exactNcclList } from './nccl-selectors.js';
import { type ValidateShardOptions, validateShard } from './validate-shard.js';
import { engineCacheEnv, prepareEngineCache } from '../../models/engine-cache-env.js';
import { StoreLayout } from '../../models/store-layout.js';
import { type OfflineStart, judgeOfflineStart, revisionOf } from '../../models/judge-offline-start.js';
import { feedStartRepos } from '../../models/feed-start-repos.js';
import { loadFormatOf } from '../../models/loader-files.js';

/**
 * What every engine shares: the command from `engines.<name>.command` (or
 * the engine's default), its env and extra_args, validation before anything
 * is launched, and rank 0 being the one that serves HTTP. An engine says only
 * how its server's own arguments are spelled.
 *
 * argv is always [/absolute/executable, ...command[1:], ...server args,
 * ...profile args, ...extra_args]: an array handed to execve, so nothing in
 * it is interpreted by a shell and no PATH is consulted at launch.
 */
export abstract class ConfiguredEngine implements Engine {
  abstract readonly name: EngineName;
  abstract readonly metrics: EngineMetrics;
  /** Its sleep API; none: it does not sleep. */
  readonly sleepApi?: EngineSleepApi;
  protected readonly config: EngineConfig;
  /**
   * The executable validate() resolved for a spec, so the file checked is the
   * file run; keyed by the spec object, which the agent passes to both.
   */
  readonly #resolved = new WeakMap<StartShard, string>();
  /** models.cache_dir when the node has a model store (useModelStore); '' when not. */
  #modelsCacheDir = '';
  /** models.hub.endpoint, for an online start's downloads. */
  #hubEndpoint: string | undefined;
  /** Whether validate() found everything the spec's engine reads at start in the store, so command() may start it offline. */
  readonly #offline = new WeakMap<StartShard, OfflineStart>();
  /** The HCAs validate() chose for a multi-node rank (chooseRankFabric). */
  readonly #fabric = new WeakMap<StartShard, RankFabric>();
  readonly #placement = new WeakMap<StartShard, NonNullable<LaunchPlan['placement']>>();
  /** This machine's online CPUs and NUMA nodes, read at the first multi-node validation. */
  #host?: HostTopology;
  /** The compile cache validate() made for a start (prepareEngineCache). */
  readonly #engineCacheDirs = new WeakMap<StartShard, string>();
  /** What an online start's hub cache got from the store (feedEngineHub), for its note. */
  readonly #fed = new WeakMap<StartShard, string>();

  constructor(
    config: Partial<EngineConfig> | undefined,
    private readonly mgmtInterface: string,
    /** This node's management address (mgmt_addr, else mgmt_interface's first IPv4); '' when unknown. */
    protected readonly mgmtAddr = '',
  ) {
    this.config = { command: [], env: {}, extraArgs: [], allowedEnv: [...DEFAULT_ALLOWED_ENV], allowedArgs: [], modelRoots: [], allowRoot: false, enabled: true, ...config };
  }

  /** The argv prefix that starts the engine when config does not say. */
  protected abstract defaultCommand(): readonly string[];

  /** The engine's own arguments for this shard: model, port, parallelism, multi-node. */
  protected abstract serverArgs(spec: StartShard): string[];

  protected prefix(): string[] {
    return this.config.command.length > 0 ? [...this.config.command] : [...this.defaultCommand()];
  }

  executable(): { command: string; path: string | undefined } {
    const command = this.prefix()[0] ?? '';
    return { command, path: resolveExecutableSync(command) };
  }

  async validate(spec: StartShard, ctx: ValidationContext): Promise<void> {
    const executable = await validateShard(spec, ctx, {
      engine: this.name,
      executable: this.prefix()[0] as string,
      executableHint: `set engines.${this.name}.command`,
      allowedEnv: this.config.allowedEnv,
      workerListens: this.workerListens(spec),
      ownedArgs: this.ownedArgs(),
      codeLoadingArgs: this.codeLoadingArgs(),
      allowedArgs: this.config.allowedArgs ?? [],
      modelRoots: this.config.modelRoots ?? [],
      checkModelPath: this.loadsModel(),
      ...this.engineValidation(spec),
    });
    // A multi-node rank talks to its peers on the HCAs nearest its GPUs, each of them up (rank-fabric.ts).
    const fabric = chooseRankFabric(spec, ctx.inventory);
    if ('refused' in fabric) throw failure(fabric.refused);
    if (fabric.fabric) this.#fabric.set(spec, fabric.fabric);
    // And on the CPUs and NUMA node of its GPUs (rank-placement.ts).
    this.#host ??= readHostTopology();
    const placement = chooseRankPlacement(spec, ctx.inventory, this.#host);
    if (placement) this.#placement.set(spec, { ...placement, ...this.#taskset(placement) });
    // Last: what the control plane got wrong is named before this node's own configuration.
    if (shardUser(this.config, spec) === undefined && this.account(ctx.agentUid).refused) throw failure(`shard ${spec.shardId}: ${rootEngineRefusal(this.name)}`);
    this.#resolved.set(spec, executable);
    // Judged here because command() is synchronous; a model pulled between the two only starts online.
    if (this.#modelsCacheDir !== '') {
      const args = spec.profile?.args ?? [];
      const others = this.loadsModel() ? hubReposIn(args, this.codeLoadingArgs()) : [];
      this.#offline.set(spec, await judgeOfflineStart(this.#modelsCacheDir, spec.profile?.model ?? '', args, others, this.name));
      const user = shardUser(this.config, spec);
      const account = user ? { uid: user.uid, gid: user.gid } : undefined;
      const engineCacheDir = new StoreLayout(this.#modelsCacheDir).engineCacheDir(account?.uid ?? ctx.agentUid, this.name, spec.profile?.model ?? '');
      await prepareEngineCache(engineCacheDir, account);
      this.#engineCacheDirs.set(spec, engineCacheDir);
      // Online with part of what it reads in the store: the engine's hub cache gets what the store holds of the model and of
      // each other repo its args name (a tokenizer, a draft), so it fetches only the rest (feed-start-repos.ts).
      const judged = this.#offline.get(spec);
      if (judged && !judged.offline && judged.storeShort && this.loadsModel()) {
        const loadFormat = loadFormatOf(args);
        const fed = await feedStartRepos({
          layout: new StoreLayout(this.#modelsCacheDir),
          model: { repo: spec.profile?.model ?? '', revision: revisionOf(args), rule: loadFormat === undefined ? { engine: this.name } : { engine: this.name, loadFormat } },
          others,
          engine: this.name,
          engineHubDir: join(engineCacheDir, 'hub'),
          ...(account && ctx.agentUid === 0 && account.uid !== 0 ? { account } : {}),
        });
        if (fed) this.#fed.set(spec, fed);
      }
    }
  }

  onlineReason(spec: StartShard): string | undefined {
    const judged = this.#offline.get(spec);
    const fed = this.#fed.get(spec);
    return judged && !judged.offline ? `${judged.reason}${fed ? `; ${fed}` : ''}` : undefined;
  }

  storeShortfall(spec: StartShard): { reason: string; repos: string[] } | undefined {
    const judged = this.#offline.get(spec);
    return judged && !judged.offline && judged.storeShort ? { reason: judged.reason, repos: judged.shortRepos ?? [spec.profile?.model ?? ''] } : undefined;
  }

  /**
   * Gives this engine's shards the node's model store as their caches
   * (engineCacheEnv): weights from local disk, compiled graphs kept across
   * starts, and no hub request at all once the model is complete there.
   */
  useModelStore(cacheDir: string, hubEndpoint?: string): void {
    this.#modelsCacheDir = cacheDir;
    this.#hubEndpoint = hubEndpoint;
  }

  account(agentUid: number): EngineAccount {
    return engineAccount(this.name, this.config, agentUid);
  }

  /** The engine's options that load code, open files or reach an endpoint (code-loading-args.ts); none by default. */
  protected codeLoadingArgs(): CodeLoadingArgs {
    return NO_CODE_LOADING_ARGS;
  }

  /** Whether the engine reads profile.model from the hub or the disk, so a local path must be under a model root; true by default. */
  protected loadsModel(): boolean {
    return true;
  }

  /**
   * What only this engine checks (throwing to refuse), and the options it
   * adds to the shared checks; nothing by default.
   */
  protected engineValidation(_spec: StartShard): Partial<ValidateShardOptions> {
    return {};
  }

  servesHttp(spec: StartShard): boolean {
    return servesHttp(spec);
  }

  /** Path whose 200 says the API rank works; /health unless the engine says otherwise. */
  protected apiHealthPath(): string {
    return '/health';
  }

  /** Limit of one probe when the engine needs more than the interval gives; 0: derived from the interval. */
  protected probeTimeoutMs(): number {
    return 0;
  }

  /** The port a worker rank answers /health on; 0 (the default) when it has none and is judged by staying alive. */
  protected workerHealthPort(_spec: StartShard): number {
    return 0;
  }

  /** The flags serverArgs() sets, which a profile's args may not set again. */
  protected abstract ownedArgs(): OwnedArgs;

  /** Whether a worker rank of this engine listens (see Engine.workerListens); none does by default. */
  workerListens(_spec: StartShard): boolean {
    return false;
  }

  /** The environment variable that also sets the engine's API key, if there is one. */
  protected apiKeyEnv(): string | undefined {
    return undefined;
  }

  /** The key of the engine's admin routes (EngineWatch.adminApiKey); '' unless the engine has one. */
  protected adminApiKey(_plan: LaunchPlan): string {
    return '';
  }

  /** Variables of the node the engine needs, under the profile's and the operator's (which may override them). */
  protected agentEnv(_spec: StartShard): Record<string, string> {
    return {};
  }

  watch(spec: StartShard, plan: LaunchPlan): EngineWatch {
    if (this.servesHttp(spec)) {
      return {
        healthPort: spec.httpPort,
        healthPath: this.apiHealthPath(),
        probeTimeoutMs: this.probeTimeoutMs(),
        readiness: 'model-listed',
        adminApiKey: this.adminApiKey(plan),
        runningGauges: [...this.metrics.runningGauges],
        inFlightGauges: [...this.metrics.inFlightGauges],
        progressCounters: [...this.metrics.progressCounters],
        apiKey: engineApiKey(plan.argv, plan.env, this.apiKeyEnv()),
        ...(this.sleepApi ? { sleepApi: this.sleepApi } : {}),
      };
    }
    // A worker rank serves no API: no model to list, no series of its own
    // (rank 0's judge the shard), at most a /health of its own.
    return {
      healthPort: this.workerHealthPort(spec),
      healthPath: '/health',
      probeTimeoutMs: this.probeTimeoutMs(),
      readiness: 'health',
      adminApiKey: '',
      runningGauges: [],
      inFlightGauges: [],
      progressCounters: [],
      apiKey: '',
    };
  }

  command(spec: StartShard): LaunchPlan {
    const [name = '', ...rest] = this.prefix();
    // An absolute path is kept even when absent (execve fails, nothing is looked up); a bare name must resolve.
    const executable = this.#resolved.get(spec) ?? (isAbsolute(name) ? name : resolveExecutableSync(name));
    if (executable === undefined) throw failure(`engine executable ${JSON.stringify(name)} is not found on the agent's PATH; set engines.${this.name}.command`);
    const argv = [executable, ...rest, ...this.serverArgs(spec), ...(spec.profile?.args ?? []), ...this.config.extraArgs];
    // Validation refused these already; a caller that skipped it still must not pass them.
    const profileEnv = Object.fromEntries(
      Object.entries(spec.profile?.env ?? {}).filter(([k]) => refuseProfileEnv(k, this.config.allowedEnv, this.name) === undefined),
    );
    // The store's variables are the node's, under the profile's and the operator's like the rest of agentEnv.
    const engineCacheDir = this.#engineCacheDirs.get(spec);
    // No compile cache without validate(): a start that skipped it gets none, rather than a folder nobody prepared.
    const cacheEnv = engineCacheDir === undefined ? {} : engineCacheEnv({ cacheDir: this.#modelsCacheDir, modelComplete: this.#offline.get(spec)?.offline === true, engineCacheDir, hubEndpoint: this.#hubEndpoint });
    // NCCL's and UCX's devices, under the operator's engines.<name>.env, which wins (shardEnv's layers).
    const fabric = this.#fabric.get(spec);
    // NCCL_IB_HCA exact, with the ports checked ACTIVE: NCCL reads a plain list as prefixes (nccl-selectors.ts).
    const fabricEnv: Record<string, string> = fabric ? { NCCL_IB_HCA: exactNcclList(fabric.ucxDevices), UCX_NET_DEVICES: fabric.ucxDevices.join(',') } : {};
    const plan: LaunchPlan = { argv, env: shardEnv(spec, this.mgmtInterface, this.config.env, profileEnv, { ...cacheEnv, ...fabricEnv, ...this.agentEnv(spec) }) };
    const user = shardUser(this.config, spec);
    if (user) plan.user = { ...user };
    const placement = this.#placement.get(spec);
    if (placement) plan.placement = placement;
    return plan;
  }

  /** taskset's path for the direct launcher's CPU pinning; none when the operator's command pins already or taskset is missing (the note says). */
  #taskset(p: RankPlacement): Partial<RankPlacement> & { taskset?: string } {
    if (p.cpus === undefined) return {};
    const own = basename(this.prefix()[0] ?? '');
    if (own === 'taskset' || own === 'numactl') return { cpus: undefined, why: `${p.why}; not pinned by the agent: engines.${this.name}.command starts with ${own}, which wins` };
    const taskset = resolveExecutableSync('taskset');
    return taskset ? { taskset } : { why: `${p.why} (systemd-run only: taskset is not on the agent's PATH for the direct launcher)` };
  }
}
