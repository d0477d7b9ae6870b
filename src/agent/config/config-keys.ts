/**
 * Every configuration key of the agent: its type, default, environment
 * variable, flag and meaning. The loader, `--print-config`, the "did you mean"
 * hints and examples/agent.yaml's test all read this one table.
 */

import { DEFAULT_ADMIN_SOCKET, DEFAULT_CONFIG_PATH, DEFAULT_LOG_DIR, DEFAULT_STATE_DIR } from '../../lib/default-paths.js';

export type KeyType =
  | 'string'
  | 'duration'
  | 'bytes'
  /** A whole number of 0 or more, e.g. how many of something are kept. */
  | 'count'
  | 'share'
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

export { DEFAULT_ADMIN_SOCKET, DEFAULT_CONFIG_PATH, DEFAULT_LOG_DIR, DEFAULT_STATE_DIR };

export const CONFIG_KEYS: readonly KeySpec[] = [
  { key: 'node_id', type: 'string', required: true, flag: 'node-id', doc: 'This node\'s id at the control plane; unique in the fleet.' },
  { key: 'server', type: 'string', required: true, flag: 'server', doc: 'Control-plane address, with its scheme: https://host:port (mutual TLS: needs tls.cert and tls.key; server-only TLS is refused, the control plane must be able to authenticate this node) or http://host:port (h2c, loopback only unless insecure_plaintext).' },
  { key: 'protocol', type: 'enum', values: ['connect', 'grpc'], default: 'connect', flag: 'protocol', doc: 'Wire protocol: connect, or grpc for control planes behind gRPC-aware proxies.' },
  { key: 'hostname', type: 'string', default: '', doc: 'Hostname reported at registration; the system\'s when empty.' },
  { key: 'mgmt_addr', type: 'string', default: '', doc: 'Management address reported at registration (multi-node leaders are reached on it); the first IPv4 of mgmt_interface when empty.' },
  { key: 'labels', type: 'labels', default: '', doc: 'Free-form labels for placement, a map of strings. Env: k=v,k2=v2.' },
  { key: 'mgmt_interface', type: 'string', default: 'eth0', doc: 'Ethernet interface NCCL and Gloo bootstrap over (NCCL_SOCKET_IFNAME).' },
  { key: 'fabrics', type: 'fabrics', default: '', doc: 'Which fabric each HCA is cabled to, a list of {hca, fabric}. Never inferred: OpenSM\'s default subnet prefix is the same on every fabric. Env: mlx5_0=fabA,mlx5_1=fabB.' },
  { key: 'heartbeat_interval', type: 'duration', default: '5s', flag: 'heartbeat-interval', doc: 'How often a heartbeat with fresh GPU memory readings is sent.' },
  { key: 'reconnect_base', type: 'duration', default: '1s', doc: 'First reconnect delay; doubles per failed attempt, with jitter.' },
  { key: 'reconnect_max', type: 'duration', default: '30s', doc: 'Longest reconnect delay.' },
  { key: 'register_timeout', type: 'duration', default: '0s', doc: 'How long a new stream may carry no message at all from the control plane before it is dropped and retried: a control plane that accepted the stream but is stuck or is not one. 0s (the default) waits for ever: nothing obliges a control plane to send anything after Register, and HTTP/2 pings already find a dead peer.' },
  { key: 'stream_stall_timeout', type: 'duration', default: '0s', doc: 'How long the stream may take nothing the agent sends (a control plane that stopped reading it; HTTP/2 pings are still answered) before it is dropped and redialled, its backlog bounded meanwhile. 0s (the default) derives it: 5 heartbeat_intervals, at least 10s. Checked at each heartbeat.' },
  { key: 'adopt_ready_timeout', type: 'duration', default: '60s', doc: 'How long an engine adopted after an agent restart gets to answer its health check. It is reported, never killed, when it does not.' },
  { key: 'tls.cert', type: 'string', default: '', doc: 'Client certificate (PEM) for mutual TLS; needs tls.key and an https:// server.' },
  { key: 'tls.key', type: 'string', default: '', doc: 'Private key (PEM) of tls.cert.' },
  { key: 'tls.ca', type: 'string', default: '', doc: 'CA bundle (PEM) that the control plane\'s certificate must chain to; the operating system\'s trust store (and NODE_EXTRA_CA_CERTS) when empty. Re-read at every connection, like tls.cert and tls.key.' },
  { key: 'tls.peer_name', type: 'string', default: '{node_id}', doc: 'The name a gang peer\'s certificate must carry for the node it answers or asks for, {node_id} standing for the gang member\'s node id: a name with :// must be one of its URI subjectAltNames (e.g. spiffe://fleet.example/node/{node_id}); any other one of its DNS subjectAltNames (e.g. {node_id}.gpu.example.com), or its subject CN when it has no DNS name. Wildcards name no node. This node\'s own tls.cert must carry it for node_id when gang_addr is set.' },
  { key: 'tls.expiry_warning', type: 'duration', default: '168h', doc: 'Warn this long (default 7 days) before the client certificate expires.' },
  { key: 'insecure_plaintext', type: 'bool', default: false, doc: 'Allow an http:// server, and a plaintext gang_addr, that is not loopback. Without TLS the control plane is not authenticated, and it decides what runs as root on this node: only for isolated test networks.' },
  { key: 'discovery.nvidia_smi', type: 'string', default: 'nvidia-smi', flag: 'nvidia-smi', doc: 'nvidia-smi executable (looked up on PATH, or a path).' },
  { key: 'discovery.sysfs_root', type: 'string', default: '/', flag: 'sysfs-root', doc: 'Root under which /sys/class/infiniband is read; "/" except in tests.' },
  { key: 'discovery.prefer_nvml', type: 'bool', default: true, doc: 'Read GPUs, memory and health through NVML (discovery.nvml_library); nvidia-smi is the fallback when the library cannot load or init fails.' },
  { key: 'discovery.nvml_library', type: 'string', default: 'libnvidia-ml.so.1', doc: 'NVML shared library: a name the dynamic loader finds, or a path.' },
  { key: 'discovery.kmsg', type: 'string', default: '/dev/kmsg', doc: 'Kernel log read for NVRM Xid lines, which NVML does not always deliver: the kmsg device (character device 1:11) is streamed, a FIFO or regular file (tests) is polled; anything else (/dev/null, as containers map /dev/kmsg, a directory) is not read, with one warning.' },
  { key: 'discovery.interval', type: 'duration', default: '60s', doc: 'How often hardware is rediscovered (GPUs that appear after boot, ports that go down).' },
  { key: 'discovery.foreign_memory_share', type: 'share', default: '5%', doc: 'Share of a GPU\'s memory that may be in use with no process listed on it (another container, a leaked CUDA context) before discover\'s foreign-memory check fails and the agent refuses StartShards on that GPU; 5% or 0.05.' },
  { key: 'discovery.timeout', type: 'duration', default: '10s', doc: 'Limit for each command discovery runs; a hung nvidia-smi gives a warning, not a hung agent.' },
  { key: 'engines', type: 'engines', default: '', doc: 'Per engine (vllm, sglang, sim): command (argv list), env (map, set by the operator), extra_args (list), allowed_env (name patterns a control plane\'s profile may set; default HF_*, VLLM_*, SGLANG_*, NCCL_*, TORCH_*, OMP_NUM_THREADS, CUDA_LAUNCH_BLOCKING, TOKENIZERS_PARALLELISM), allowed_args (flags that load code, open files or reach an endpoint, such as --trust-remote-code or --chat-template, which a profile\'s args may set; default none), model_roots (absolute directories a local model may be under, resolved through symlinks; default none: hub repo ids only), user (an account to run the engine as), allow_root (with user empty, a root agent starts the engine as root only when true; default false), allow_sleep_mode (vllm only: a profile with sleep_mode may start, which opens vLLM\'s unguarded dev endpoints; default false), sleep_port_guard (vllm and sglang: nftables, the default, keeps a sleep_mode shard\'s port from every local uid but the agent\'s and the engine\'s, refusing the start when it cannot; none leaves it open to local users), profile_users (map of profile name to account: that profile\'s engines run as it, with caches of their own; others run as user), enabled (false turns the engine off on this node: its starts are refused; true by default for vllm and sglang, false for sim).' },
  { key: 'supervisor.state_dir', type: 'string', default: DEFAULT_STATE_DIR, flag: 'state-dir', doc: 'Shard state files (mode 0700); they let a restarted agent find its engines.' },
  { key: 'supervisor.log_dir', type: 'string', default: DEFAULT_LOG_DIR, flag: 'log-dir', doc: 'Engine logs, shards/<shard_id>.log.' },
  { key: 'supervisor.stop_grace', type: 'duration', default: '30s', doc: 'Time between SIGTERM and SIGKILL when a shard is stopped; vLLM is told to drain for up to this less a margin (--shutdown-timeout). At least 2s.' },
  { key: 'supervisor.worker_settle', type: 'duration', default: '10s', doc: 'How long a worker rank (no HTTP) must stay alive to count as ready.' },
  { key: 'supervisor.health_interval', type: 'duration', default: '10s', doc: 'Health probe period of a ready shard; 3 failures in a row make it UNHEALTHY.' },
  { key: 'supervisor.stall_timeout', type: 'duration', default: '60s', doc: 'A ready engine with requests running whose progress counters (tokens generated and prefilled, requests finished) have not moved for this long is reported UNHEALTHY ("stalled"), never killed; 0s turns it off.' },
  { key: 'supervisor.known_answer_interval', type: 'duration', default: '0s', doc: 'How often a ready engine is asked its known answer (a greedy 4-token completion of a fixed counting prompt, compared with the answer it gave at its first READY): an engine that answers /health while generating garbage or nothing is reported UNHEALTHY ("known answer changed"), never killed. Each check is one short generation on the engine, queued behind its traffic. 0s (the default) turns it off; wakes of sleep profiles are checked either way.' },
  { key: 'supervisor.known_answer_timeout', type: 'duration', default: '30s', doc: 'How long the first ask for an engine\'s known answer (its record at the first READY, the proof of a wake, the periodic check) waits for the answer before it counts as not obtained: no verdict, the shard stays as it was and is asked again, each ask waiting twice as long as the last, up to 20 times this. Raise it where a big model on a busy engine answers its first ask after a wake later than that: each ask given up on queues again at the back. More than 0.' },
  { key: 'supervisor.wake_timeout', type: 'duration', default: '0s', doc: 'How long a WakeShard may take, from the engine\'s calls to its known answer, before it is reported failed (the shard stays SLEEPING). 0s (the default) derives it: 120s, and for a vLLM level-2 wake, which reads the whole model from disk again, 120s plus twice the model\'s bytes (in the store, else what its GPUs held) at the disk rate the node last measured (200 MiB/s before any).' },
  { key: 'supervisor.log_max_bytes', type: 'bytes', default: '64MiB', doc: 'Size at which an engine log is rotated (one old generation kept).' },
  { key: 'supervisor.log_retention', type: 'duration', default: '168h', doc: 'Logs of shards no longer supervised (every generation, .log.1 and .log.prev included) are removed once not written for this long; 0s keeps them.' },
  { key: 'supervisor.log_retention_bytes', type: 'bytes', default: '1GiB', doc: 'Logs of shards no longer supervised are cut, oldest first, to this total size. Logs of supervised shards are never removed.' },
  { key: 'supervisor.keep_previous_runs', type: 'count', default: '3', doc: 'Earlier runs of a shard id whose log and failure record are kept in <log_dir>/previous-runs when the id is started again (ctl logs --previous); 0 keeps none.' },
  { key: 'supervisor.keep_terminal_shards', type: 'count', default: '16', doc: 'Most FAILED, EXITED and STOPPED shards the agent keeps listing (ctl status --all) with their state files; the oldest beyond are forgotten, their logs kept. A shard whose engine may still run is never forgotten.' },
  { key: 'supervisor.terminal_retention', type: 'duration', default: '1h', doc: 'A FAILED, EXITED or STOPPED shard is forgotten this long after it ended (or sooner, past keep_terminal_shards); 0s: no age limit.' },
  { key: 'supervisor.disk_pressure.min_free', type: 'bytes', default: '1GiB', doc: 'Disk pressure (a node condition, kubelet\'s DiskPressure): free space of supervisor.log_dir or supervisor.state_dir below this. While it holds, new StartShards are refused naming it, running engines keep serving (log lines they cannot write are lost until space returns), and ctl status, the metrics and the control plane say so.' },
  { key: 'supervisor.disk_pressure.min_free_inodes', type: 'share', default: '5%', doc: 'Disk pressure as well: free inodes of supervisor.log_dir or supervisor.state_dir below this share of the file system\'s; 5% or 0.05, 0% off. File systems that report no inode count (btrfs) are judged by space only.' },
  { key: 'supervisor.disk_pressure.interval', type: 'duration', default: '10s', doc: 'How often free space and inodes of log_dir and state_dir are read (statfs); 0s turns the disk pressure watch off.' },
  { key: 'supervisor.launcher', type: 'enum', values: ['auto', 'direct', 'systemd-run'], default: 'auto', doc: 'auto: systemd-run when systemd is PID 1 and the agent is root, direct otherwise (the log says which and why). direct: engines in their own session and process group. systemd-run: each engine in its own transient unit llmgw-shard-<id>.service in llmgw.slice, whose cgroup a stop ends entirely.' },
  { key: 'supervisor.unit_properties', type: 'labels', default: '', doc: 'Resource properties of every engine unit under systemd-run, a map such as {MemoryMax: 400G, CPUWeight: "200"}; only resource limits are allowed (CPUWeight, CPUQuota, AllowedCPUs, MemoryMax, MemoryHigh, TasksMax, LimitNOFILE, …). Env: MemoryMax=400G,CPUWeight=200.' },
  { key: 'models.cache_dir', type: 'string', default: '', doc: 'Node-local model store (llmgw models pull|list|rm): an absolute directory on local disk, root\'s and writable by no one else (the agent refuses it otherwise, exit 78: docs/store.md, "Who owns the model store"). Laid out as the Hugging Face hub cache under <cache_dir>/hub; each engine account, engine and model has its own cache folder under <cache_dir>/engines. Off when empty.' },
  { key: 'models.budget', type: 'bytes', default: '', doc: 'Disk the model store may use, e.g. 500GiB; required with models.cache_dir. A pull that would exceed it first evicts the least recently used models no shard pins.' },
  { key: 'models.hub.endpoint', type: 'string', default: 'https://huggingface.co', doc: 'Hugging Face Hub (or mirror) models are pulled from: an http:// or https:// address. Never taken from the control plane.' },
  { key: 'models.hub.token_file', type: 'string', default: '', doc: 'File holding the hub access token (sent as a Bearer token), read at each pull; no token when empty.' },
  { key: 'models.hub.redirect_hosts', type: 'string', default: '', doc: 'Private hosts (names or addresses, comma or space separated) a redirect of a download may reach: your mirror\'s CDN in the rack. A redirect to another host is judged by the address it reaches, in any spelling: never to loopback, link-local (169.254.169.254) or unspecified addresses, to private ones only when listed here, to public ones always.' },
  { key: 'models.max_concurrent', type: 'count', default: '4', doc: 'Files downloaded at once by one llmgw process; at least 1.' },
  { key: 'models.bandwidth', type: 'bytes', default: '', doc: 'Bytes per second all downloads of one llmgw process share, e.g. 200MiB; unlimited when empty.' },
  { key: 'admin.socket', type: 'string', default: DEFAULT_ADMIN_SOCKET, env: ['LLMGW_ADMIN_SOCKET', 'LLMGW_SOCKET'], flag: 'socket', doc: 'Unix socket that llmgw ctl talks to (mode 0660).' },
  { key: 'admin.group', type: 'string', default: '', doc: 'Group owning the admin socket; operators in it may use llmgw ctl.' },
  { key: 'admin.read_group', type: 'string', default: '', doc: 'Group whose members may read everything over the admin socket (ctl status, logs, events, top) and change nothing: every other call is refused in one line (ctl exits 77). When set, the socket is 0666 and its directory o+x, and the agent admits each connection by the groups of the process at the other end (admin.group, this group, or root). Off when empty.' },
  { key: 'gang_addr', type: 'string', default: '', doc: 'host:port of this agent\'s gang endpoint, which the other ranks of its multi-node replicas ask how its ranks are (docs/engines.md, "Multi-node replicas"); mutual TLS with the tls keys when they are set; without them, plaintext on a loopback address only (unless insecure_plaintext). Off when empty: peers then watch its rank 0 by its rendezvous port alone.' },
  { key: 'gang_agent_grace', type: 'duration', default: '10s', doc: 'How long a multi-node replica\'s peer whose agent refuses connections (a restart, an upgrade), with nothing else showing its rank alive or dead, may stay so before this agent reports the gang broken; also how long a peer\'s agent may not yet list its rank after the start. Raise it where an agent restart can take longer; a peer whose engine ports were seen open is judged by them sooner either way (docs/engines.md, "Multi-node replicas").' },
  { key: 'metrics_addr', type: 'string', default: '', flag: 'metrics-addr', doc: 'host:port of a Prometheus /metrics endpoint; off when empty.' },
  { key: 'log_level', type: 'enum', values: ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'], default: 'info', flag: 'log-level', doc: 'Least severe level logged.' },
];

/** CONFIG_KEYS by dotted key, for the file reader, the flags and the cross-key checks. */
export const SPEC_BY_KEY: ReadonlyMap<string, KeySpec> = new Map(CONFIG_KEYS.map((s) => [s.key, s]));

/** The top-level YAML keys that hold sections of other keys. */
export const SECTIONS = ['tls', 'discovery', 'supervisor', 'admin', 'models'] as const;

/** Sections inside a section, by dotted path. */
export const SUBSECTIONS = ['models.hub', 'supervisor.disk_pressure'] as const;

export function envNames(spec: KeySpec): readonly string[] {
  return spec.env ?? [`LLMGW_${spec.key.replaceAll('.', '_').toUpperCase()}`];
}
