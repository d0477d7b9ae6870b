import type { EngineName } from '../../lib/engine-names.js';
import type { ModelsConfig } from '../../models/models-config.js';
/**
 * The agent's resolved configuration. Durations are milliseconds (names end in
 * Ms); the YAML file spells them as strings ("5s"). Every key, its default and
 * its documentation live in config-keys.ts.
 */

export type Protocol = 'connect' | 'grpc';
export type Launcher = 'direct' | 'systemd-run';
/** The configured launcher: `auto` is decided at start (chooseLauncher). */
export type LauncherSetting = Launcher | 'auto';

export interface FabricAttachmentConfig {
  hca: string;
  fabric: string;
}

export interface TlsConfig {
  /** Client certificate (PEM) presented to the control plane. */
  cert: string;
  /** Its private key (PEM). */
  key: string;
  /** CA bundle (PEM) the control plane's certificate must chain to; system roots when empty. */
  ca: string;
  /** How long before the client certificate expires the agent starts warning. */
  expiryWarningMs: number;
  /** The name a gang peer's certificate carries for its node (tls.peer_name, certNamesNode); DEFAULT_PEER_NAME when absent. */
  peerName?: string;
}

export interface DiscoveryConfig {
  /** nvidia-smi executable: a name looked up on PATH, or a path. */
  nvidiaSmi: string;
  /** Root under which /sys is read; "/" except in tests. */
  sysfsRoot: string;
  /** Read GPUs through NVML, nvidia-smi being the fallback. */
  preferNvml: boolean;
  /** NVML shared library: a name the dynamic loader finds, or a path. */
  nvmlLibrary: string;
  /** Kernel log read for NVRM Xid lines. */
  kmsg: string;
  /** How often hardware is rediscovered. */
  intervalMs: number;
  /** Limit for every external command discovery runs. */
  timeoutMs: number;
  /** 0..1: a GPU with more of its memory used by no listed process is flagged (foreignMemoryProblem). */
  foreignMemoryShare: number;
}

/** An account engines run as, resolved when the config is loaded so a typo fails at start, not at launch. */
export interface EngineUser {
  name: string;
  uid: number;
  /** Primary group. */
  gid: number;
  /** HOME for the engine: the Hugging Face cache defaults to $HOME/.cache, which root's HOME would deny. */
  home: string;
}

export interface EngineConfig {
  /** argv prefix that starts the engine, e.g. ["/opt/vllm/bin/vllm", "serve"]; never a shell string. */
  command: string[];
  /** Set by the operator (root): any name, unlike a profile's env. */
  env: Record<string, string>;
  extraArgs: string[];
  /** Name patterns (exact, or a prefix ending in `*`) a control plane's profile.env may set. */
  allowedEnv: string[];
  /** Unprivileged account for the engine; undefined runs it as the agent's user. */
  user?: EngineUser;
  /**
   * A root agent starts this engine as root when `user` is unset only with
   * this true; otherwise such a start is refused, naming `user` and this key
   * (security review 2, N1). Default false.
   */
  allowRoot?: boolean;
  /**
   * vLLM only: a profile with sleep_mode may start (it turns on vLLM's dev
   * endpoints, which no API key guards). Default false: such a start is
   * refused (security review 3, S6).
   */
  allowSleepMode?: boolean;
  /**
   * vllm and sglang: how the port of a shard with sleep_mode is kept from
   * other local users (sleep-port-guards.ts). 'nftables' (the default): a
   * loopback rule lets only the agent's and the engine's uid connect, and a
   * start is refused when it cannot be set; 'none': the operator's word
   * that no other local user runs on the node, said at every such start.
   */
  sleepPortGuard?: 'nftables' | 'none';
  /**
   * Accounts by profile name (engines.<name>.profile_users): a profile listed
   * runs as its own account, with its own compile caches (engines/<uid>/…);
   * any other profile runs as `user`. Tenants that must not share caches
   * each get one (security review 4, S9).
   */
  profileUsers?: Record<string, EngineUser>;
  /**
   * Options of the engine that load code, open files or reach an endpoint
   * (code-loading-args.ts) which a profile's args may set anyway, as
   * `--flag`. Default none.
   */
  allowedArgs?: string[];
  /**
   * Absolute directories a local model may be under (profile.model, and
   * options such as --tokenizer); realpath'd, so no symlink or `..` leads
   * out. Default none: hub repo ids only.
   */
  modelRoots?: string[];
  /** Whether the engine is registered at all; only `sim` is off by default. */
  enabled: boolean;
}

export interface SupervisorConfig {
  stateDir: string;
  logDir: string;
  stopGraceMs: number;
  workerSettleMs: number;
  healthIntervalMs: number;
  /** Requests running and no progress (token, finished request) for this long: UNHEALTHY ("stalled"). 0 is off. Default 60 s. */
  stallTimeoutMs: number;
  /** supervisor.known_answer_interval: a READY engine is asked its known answer this often (known-answer.ts); 0 or absent is off. */
  knownAnswerIntervalMs?: number;
  /** supervisor.known_answer_timeout: the limit of the first known-answer ask (KNOWN_ANSWER_TIMEOUT_MS when absent); later asks scale from it (known-answer-retry.ts). */
  knownAnswerTimeoutMs?: number;
  /** supervisor.wake_timeout: a wake's deadline; 0 or absent derives it (wake-deadline.ts). */
  wakeTimeoutMs?: number;
  logMaxBytes: number;
  /** Logs of shards no longer supervised are removed once not written for this long; 0 keeps them. Default 168 h. */
  logRetentionMs?: number;
  /** Logs of shards no longer supervised are cut, oldest first, to this many bytes in total. Default 1 GiB. */
  logRetentionBytes?: number;
  /** supervisor.disk_pressure: thresholds of the disk pressure node condition (health/disk-pressure-watch.ts); the config loader always sets it, DEFAULT_DISK_PRESSURE when absent. */
  diskPressure?: DiskPressureConfig;
  launcher: LauncherSetting;
  /** Resource properties (MemoryMax, CPUWeight…) of every engine unit under systemd-run; see ALLOWED_UNIT_PROPERTIES. */
  unitProperties?: Record<string, string>;
  /** Earlier runs of a shard id whose log and failure record are kept (previous-runs/); DEFAULT_KEEP_PREVIOUS_RUNS (3) when absent, 0 keeps none. */
  keepPreviousRuns?: number;
  /** Most FAILED/EXITED/STOPPED shards kept in the table (and their state files); DEFAULT_KEEP_TERMINAL_SHARDS (16) when absent. */
  keepTerminalShards?: number;
  /** Terminal shards are forgotten this long after they ended; DEFAULT_TERMINAL_RETENTION_MS (1 h) when absent, 0: no age limit. */
  terminalRetentionMs?: number;
}

/** When log_dir or state_dir is too full for new shards. */
export interface DiskPressureConfig {
  /** Free bytes below which a directory's file system is under pressure. Default 1 GiB. */
  minFree: number;
  /** Share (0..1) of free inodes below which it is; 0 is off. Default 5%. */
  minFreeInodes: number;
  /** statfs period; 0 turns the watch off. Default 10 s. */
  intervalMs: number;
}

export interface AdminConfig {
  socket: string;
  /** Group given the socket (mode 0660); the agent's own group when empty. */
  group: string;
  /** admin.read_group: members may read everything over the socket and change nothing; '' for none (the socket is then 0666). */
  readGroup?: string;
}

/** The models config is the store's own (src/models/models-config.ts); re-exported for the config loader's readers. */
export type { ModelsConfig } from '../../models/models-config.js';

export interface AgentConfig {
  nodeId: string;
  server: string;
  protocol: Protocol;
  hostname: string;
  mgmtAddr: string;
  labels: Record<string, string>;
  mgmtInterface: string;
  fabrics: FabricAttachmentConfig[];
  heartbeatIntervalMs: number;
  reconnectBaseMs: number;
  reconnectMaxMs: number;
  /** 0: a silent stream is never given up on. */
  registerTimeoutMs: number;
  /** stream_stall_timeout: a stream that took nothing this long is dropped; 0 or absent derives it from the heartbeat (stalledOutboxLimitMs). */
  streamStallTimeoutMs?: number;
  adoptReadyTimeoutMs: number;
  tls: TlsConfig;
  /** Accept an http:// server that is not loopback: the stream, and every command on it, unauthenticated. */
  insecurePlaintext: boolean;
  discovery: DiscoveryConfig;
  engines: Partial<Record<EngineName, EngineConfig>>;
  supervisor: SupervisorConfig;
  admin: AdminConfig;
  models: ModelsConfig;
  /** host:port of the gang endpoint (issue 40); '' when off. */
  gangAddr: string;
  /** gang_agent_grace: how long a peer's agent may refuse, with nothing else to judge its rank by, before the gang is broken (GangWatch). */
  gangAgentGraceMs: number;
  metricsAddr: string;
  logLevel: string;
}

/** True when any TLS material is configured. */
export function tlsEnabled(tls: TlsConfig): boolean {
  return tls.cert !== '' || tls.key !== '' || tls.ca !== '';
}
