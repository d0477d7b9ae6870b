/**
 * Every configuration key of the agent: its type, default, environment
 * variable, flag and meaning. The loader, `--print-config`, the "did you mean"
 * hints and examples/agent.yaml's test all read this one table.
 */

export type KeyType =
  | 'string'
  | 'duration'
  | 'bytes'
  | 'bool'
  | 'enum'
  | 'labels'
  | 'fabrics'
  | 'engines';

export interface KeySpec {
  /** Dotted YAML path, e.g. "supervisor.state_dir". */
  key: string;
  type: KeyType;
  /** Default as the YAML file would spell it; undefined means no default. */
  default?: string | boolean;
  required?: boolean;
  /** Allowed values of an enum key. */
  values?: readonly string[];
  /** Environment variables, first wins; LLMGW_<KEY> by default. */
  env?: readonly string[];
  /** Flag of `agent run` that sets it, without the dashes. */
  flag?: string;
  doc: string;
}

export const DEFAULT_CONFIG_PATH = '/etc/llmgw/agent.yaml';
export const DEFAULT_STATE_DIR = '/var/lib/llmgw';
export const DEFAULT_LOG_DIR = '/var/log/llmgw';
export const DEFAULT_ADMIN_SOCKET = '/run/llmgw/agent.sock';

export const CONFIG_KEYS: readonly KeySpec[] = [
  { key: 'node_id', type: 'string', required: true, flag: 'node-id', doc: 'This node\'s id at the control plane; unique in the fleet.' },
  { key: 'server', type: 'string', required: true, flag: 'server', doc: 'Control-plane address: http://host:port (h2c) or https://host:port (TLS, needs tls).' },
  { key: 'protocol', type: 'enum', values: ['connect', 'grpc'], default: 'connect', flag: 'protocol', doc: 'Wire protocol: connect, or grpc for control planes behind gRPC-aware proxies.' },
  { key: 'hostname', type: 'string', default: '', doc: 'Hostname reported at registration; the system\'s when empty.' },
  { key: 'mgmt_addr', type: 'string', default: '', doc: 'Management address reported at registration (multi-node leaders are reached on it); the first IPv4 of mgmt_interface when empty.' },
  { key: 'labels', type: 'labels', default: '', doc: 'Free-form labels for placement, a map of strings. Env: k=v,k2=v2.' },
  { key: 'mgmt_interface', type: 'string', default: 'eth0', doc: 'Ethernet interface NCCL and Gloo bootstrap over (NCCL_SOCKET_IFNAME).' },
  { key: 'fabrics', type: 'fabrics', default: '', doc: 'Which fabric each HCA is cabled to, a list of {hca, fabric}. Never inferred: OpenSM\'s default subnet prefix is the same on every fabric. Env: mlx5_0=fabA,mlx5_1=fabB.' },
  { key: 'heartbeat_interval', type: 'duration', default: '5s', flag: 'heartbeat-interval', doc: 'How often a heartbeat with fresh GPU memory readings is sent.' },
  { key: 'reconnect_base', type: 'duration', default: '1s', doc: 'First reconnect delay; doubles per failed attempt, with jitter.' },
  { key: 'reconnect_max', type: 'duration', default: '30s', doc: 'Longest reconnect delay.' },
  { key: 'register_timeout', type: 'duration', default: '30s', doc: 'How long a new stream may carry no message at all from the control plane before it is dropped and retried: a control plane that accepted the stream but is stuck or is not one. The reference control plane acknowledges Register at once. 0s waits for ever, for a control plane that sends nothing until it has a command.' },
  { key: 'adopt_ready_timeout', type: 'duration', default: '60s', doc: 'How long an engine adopted after an agent restart gets to answer its health check. It is reported, never killed, when it does not.' },
  { key: 'tls.cert', type: 'string', default: '', doc: 'Client certificate (PEM) for mutual TLS; needs tls.key and an https:// server.' },
  { key: 'tls.key', type: 'string', default: '', doc: 'Private key (PEM) of tls.cert.' },
  { key: 'tls.ca', type: 'string', default: '', doc: 'CA bundle (PEM) that the control plane\'s certificate must chain to; system roots when empty.' },
  { key: 'discovery.nvidia_smi', type: 'string', default: 'nvidia-smi', flag: 'nvidia-smi', doc: 'nvidia-smi executable (looked up on PATH, or a path).' },
  { key: 'discovery.sysfs_root', type: 'string', default: '/', flag: 'sysfs-root', doc: 'Root under which /sys/class/infiniband is read; "/" except in tests.' },
  { key: 'discovery.prefer_nvml', type: 'bool', default: false, doc: 'Kept for compatibility with the Go agent; this build reads nvidia-smi.' },
  { key: 'discovery.interval', type: 'duration', default: '60s', doc: 'How often hardware is rediscovered (GPUs that appear after boot, ports that go down).' },
  { key: 'discovery.timeout', type: 'duration', default: '10s', doc: 'Limit for each command discovery runs; a hung nvidia-smi gives a warning, not a hung agent.' },
  { key: 'engines', type: 'engines', default: '', doc: 'Per engine (vllm, sglang, sim): command (argv list), env (map), extra_args (list).' },
  { key: 'supervisor.state_dir', type: 'string', default: DEFAULT_STATE_DIR, flag: 'state-dir', doc: 'Shard state files (mode 0700); they let a restarted agent find its engines.' },
  { key: 'supervisor.log_dir', type: 'string', default: DEFAULT_LOG_DIR, flag: 'log-dir', doc: 'Engine logs, shards/<shard_id>.log.' },
  { key: 'supervisor.stop_grace', type: 'duration', default: '30s', doc: 'Time between SIGTERM and SIGKILL when a shard is stopped; vLLM is told to drain for up to this less a margin (--shutdown-timeout). At least 2s.' },
  { key: 'supervisor.worker_settle', type: 'duration', default: '10s', doc: 'How long a worker rank (no HTTP) must stay alive to count as ready.' },
  { key: 'supervisor.health_interval', type: 'duration', default: '10s', doc: 'Health probe period of a ready shard; 3 failures in a row make it UNHEALTHY.' },
  { key: 'supervisor.stall_timeout', type: 'duration', default: '60s', doc: 'A ready engine with requests running whose generation-token counter has not moved for this long is reported UNHEALTHY ("stalled"), never killed; 0s turns it off.' },
  { key: 'supervisor.log_max_bytes', type: 'bytes', default: '64MiB', doc: 'Size at which an engine log is rotated (one old generation kept).' },
  { key: 'supervisor.log_retention', type: 'duration', default: '168h', doc: 'Logs of shards no longer supervised (every generation, .log.1 and .log.prev included) are removed once not written for this long; 0s keeps them.' },
  { key: 'supervisor.log_retention_bytes', type: 'bytes', default: '1GiB', doc: 'Logs of shards no longer supervised are cut, oldest first, to this total size. Logs of supervised shards are never removed.' },
  { key: 'supervisor.launcher', type: 'enum', values: ['direct', 'systemd-run'], default: 'direct', doc: 'direct: engines in their own session; systemd-run: each engine in its own transient unit and cgroup.' },
  { key: 'admin.socket', type: 'string', default: DEFAULT_ADMIN_SOCKET, env: ['LLMGW_ADMIN_SOCKET', 'LLMGW_SOCKET'], flag: 'socket', doc: 'Unix socket that llmgw ctl talks to (mode 0660).' },
  { key: 'admin.group', type: 'string', default: '', doc: 'Group owning the admin socket; operators in it may use llmgw ctl.' },
  { key: 'metrics_addr', type: 'string', default: '', flag: 'metrics-addr', doc: 'host:port of a Prometheus /metrics endpoint; off when empty.' },
  { key: 'log_level', type: 'enum', values: ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'], default: 'info', flag: 'log-level', doc: 'Least severe level logged.' },
];

/** The top-level YAML keys that hold sections of other keys. */
export const SECTIONS = ['tls', 'discovery', 'supervisor', 'admin'] as const;

export function envNames(spec: KeySpec): readonly string[] {
  return spec.env ?? [`LLMGW_${spec.key.replaceAll('.', '_').toUpperCase()}`];
}
