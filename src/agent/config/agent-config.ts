/**
 * The agent's resolved configuration. Durations are milliseconds (names end in
 * Ms); the YAML file spells them as strings ("5s"). Every key, its default and
 * its documentation live in config-keys.ts.
 */

export type Protocol = 'connect' | 'grpc';
export type Launcher = 'direct' | 'systemd-run';
export const ENGINE_NAMES = ['vllm', 'sglang', 'sim'] as const;
export type EngineName = (typeof ENGINE_NAMES)[number];

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
}

export interface DiscoveryConfig {
  /** nvidia-smi executable: a name looked up on PATH, or a path. */
  nvidiaSmi: string;
  /** Root under which /sys is read; "/" except in tests. */
  sysfsRoot: string;
  /** Accepted for compatibility with the Go agent; this build always reads nvidia-smi. */
  preferNvml: boolean;
  /** How often hardware is rediscovered. */
  intervalMs: number;
  /** Limit for every external command discovery runs. */
  timeoutMs: number;
}

export interface EngineConfig {
  /** argv prefix that starts the engine, e.g. ["/opt/vllm/bin/vllm", "serve"]; never a shell string. */
  command: string[];
  env: Record<string, string>;
  extraArgs: string[];
}

export interface SupervisorConfig {
  stateDir: string;
  logDir: string;
  stopGraceMs: number;
  workerSettleMs: number;
  healthIntervalMs: number;
  /** Requests running and no generation token for this long: UNHEALTHY ("stalled"). 0 is off. Default 60 s. */
  stallTimeoutMs: number;
  logMaxBytes: number;
  /** Logs of shards no longer supervised are removed once not written for this long; 0 keeps them. Default 168 h. */
  logRetentionMs?: number;
  /** Logs of shards no longer supervised are cut, oldest first, to this many bytes in total. Default 1 GiB. */
  logRetentionBytes?: number;
  launcher: Launcher;
}

export interface AdminConfig {
  socket: string;
  /** Group given the socket (mode 0660); the agent's own group when empty. */
  group: string;
}

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
  adoptReadyTimeoutMs: number;
  tls: TlsConfig;
  discovery: DiscoveryConfig;
  engines: Partial<Record<EngineName, EngineConfig>>;
  supervisor: SupervisorConfig;
  admin: AdminConfig;
  metricsAddr: string;
  logLevel: string;
}

/** True when any TLS material is configured. */
export function tlsEnabled(tls: TlsConfig): boolean {
  return tls.cert !== '' || tls.key !== '' || tls.ca !== '';
}
