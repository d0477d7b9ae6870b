/**
 * Where a production install keeps its files, in one module below both the
 * agent and ctl: ctl must look where the agent puts things, and two copies of
 * a path drift apart (ctl would then report "not running" for a live agent).
 */

/** The agent's configuration file (`--config`). */
export const DEFAULT_CONFIG_PATH = '/etc/llmgw/agent.yaml';
/** `supervisor.state_dir`: shard state files, mode 0700. */
export const DEFAULT_STATE_DIR = '/var/lib/llmgw';
/** `supervisor.log_dir`: engine logs. */
export const DEFAULT_LOG_DIR = '/var/log/llmgw';
/** `admin.socket`: the Unix socket `llmgw ctl` talks to. */
export const DEFAULT_ADMIN_SOCKET = '/run/llmgw/agent.sock';
