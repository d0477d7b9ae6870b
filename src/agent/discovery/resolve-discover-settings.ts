import { parseDuration } from '../../lib/duration.js';
import { configError, usageError } from '../../lib/errors.js';
import { DEFAULT_FOREIGN_MEMORY_SHARE } from '../../lib/foreign-memory-problem.js';
import type { AgentConfig, FabricAttachmentConfig } from '../config/agent-config.js';
import { CONFIG_KEYS, envNames } from '../config/config-keys.js';
import { loadAgentConfig } from '../config/load-agent-config.js';

export interface DiscoverSettings {
  nvidiaSmi: string;
  sysfsRoot: string;
  timeoutMs: number;
  /** discovery.foreign_memory_share: the foreign-memory check's limit. */
  foreignMemoryShare: number;
  fabrics: FabricAttachmentConfig[];
  mgmtInterface: string;
  /** discovery.prefer_nvml and discovery.nvml_library. */
  preferNvml: boolean;
  nvmlLibrary: string;
  /** True when a config file was given: it says what the node is supposed to have. */
  fromConfig: boolean;
  /** engines from the config (with --config): who each engine runs as is a preflight check. */
  engines?: AgentConfig['engines'];
  /** supervisor.state_dir: where the agent keeps the rates it measured (Inventory.rates). */
  stateDir: string;
}

export interface DiscoverFlags {
  config?: string;
  nvidiaSmi?: string;
  sysfsRoot?: string;
  /** A duration string, e.g. "10s". */
  timeout?: string;
}

const defaultOf = (key: string): string => String(CONFIG_KEYS.find((k) => k.key === key)?.default ?? '');

/** The key's LLMGW_* variable: honoured without --config too, as the agent honours it. */
function envValue(key: string): string | undefined {
  const spec = CONFIG_KEYS.find((k) => k.key === key);
  return spec ? envNames(spec).map((n) => process.env[n]).find((v) => v !== undefined && v !== '') : undefined;
}

function envBool(key: string): boolean | undefined {
  const v = envValue(key);
  if (v === undefined) return undefined;
  if (/^(true|1|yes)$/i.test(v)) return true;
  if (/^(false|0|no)$/i.test(v)) return false;
  throw configError(`${envNames(CONFIG_KEYS.find((k) => k.key === key) as (typeof CONFIG_KEYS)[number])[0]}=${JSON.stringify(v)} must be true or false`);
}

/**
 * What `llmgw discover` probes with: the agent's own config when --config
 * is given (so an operator sees exactly what the agent would), else the
 * agent's defaults; flags win either way. Without --config no file is read,
 * not even /etc/llmgw/agent.yaml: discover is used on nodes before the agent
 * is configured, and must not fail for want of node_id.
 */
export function resolveDiscoverSettings(flags: DiscoverFlags): DiscoverSettings {
  if (flags.timeout !== undefined) {
    const ms = parseDuration(flags.timeout);
    if (ms === undefined || ms <= 0) throw usageError(`--timeout ${JSON.stringify(flags.timeout)} is not a duration; write it like 500ms, 5s or 2m`);
  }
  if (flags.config !== undefined) {
    const { config } = loadAgentConfig({
      configPath: flags.config,
      flags: {
        'discovery.nvidia_smi': flags.nvidiaSmi,
        'discovery.sysfs_root': flags.sysfsRoot,
        'discovery.timeout': flags.timeout,
      },
    });
    return {
      nvidiaSmi: config.discovery.nvidiaSmi,
      sysfsRoot: config.discovery.sysfsRoot,
      timeoutMs: config.discovery.timeoutMs,
      foreignMemoryShare: config.discovery.foreignMemoryShare,
      fabrics: config.fabrics,
      mgmtInterface: config.mgmtInterface,
      preferNvml: config.discovery.preferNvml,
      nvmlLibrary: config.discovery.nvmlLibrary,
      fromConfig: true,
      engines: config.engines,
      stateDir: config.supervisor.stateDir,
    };
  }
  return {
    nvidiaSmi: flags.nvidiaSmi ?? defaultOf('discovery.nvidia_smi'),
    sysfsRoot: flags.sysfsRoot ?? defaultOf('discovery.sysfs_root'),
    timeoutMs: parseDuration(flags.timeout ?? defaultOf('discovery.timeout')) as number,
    foreignMemoryShare: DEFAULT_FOREIGN_MEMORY_SHARE,
    fabrics: [],
    mgmtInterface: defaultOf('mgmt_interface'),
    preferNvml: envBool('discovery.prefer_nvml') ?? defaultOf('discovery.prefer_nvml') === 'true',
    nvmlLibrary: envValue('discovery.nvml_library') || defaultOf('discovery.nvml_library'),
    fromConfig: false,
    stateDir: envValue('supervisor.state_dir') || defaultOf('supervisor.state_dir'),
  };
}
