import { configError } from '../../lib/errors.js';
import { CONFIG_KEYS, DEFAULT_CONFIG_PATH, SPEC_BY_KEY, envNames } from './config-keys.js';
import type { AgentConfig } from './agent-config.js';
import { camelPath } from './camel-path.js';
import { checkConfigCrossKeys } from './check-config-cross-keys.js';
import { parseConfigValue } from './parse-config-value.js';
import { readConfigFile } from './read-config-file.js';
import { describeSource, type RawValue, type ValueSource } from './value-source.js';

// Callers (print-config, agent run) have always taken these from the loader.
export { describeSource, type ValueSource };

export interface LoadConfigOptions {
  /** The --config flag; DEFAULT_CONFIG_PATH when absent. */
  configPath?: string;
  env?: NodeJS.ProcessEnv;
  /** Flag values keyed by config key ("supervisor.state_dir"), undefined when not given. */
  flags?: Readonly<Record<string, string | undefined>>;
  /**
   * Required keys this command does not use, left empty when unset: `models
   * pull` and the other store commands never reach the control plane, so
   * they need no `server` or `node_id` (walkthrough 4, O12).
   */
  unneeded?: readonly string[];
}

export interface LoadedConfig {
  config: AgentConfig;
  /** Effective source of every key. */
  sources: ReadonlyMap<string, ValueSource>;
  /** The raw (YAML-spelt) effective value of every key, for display. */
  values: ReadonlyMap<string, unknown>;
  path: string;
  fileFound: boolean;
}

/**
 * Loads the agent's configuration: defaults, then the YAML file, then LLMGW_*
 * environment variables, then flags. Every problem is a configuration error
 * (exit 78) whose one line names the key and where the bad value came from.
 */
export function loadAgentConfig(options: LoadConfigOptions = {}): LoadedConfig {
  const path = options.configPath ?? DEFAULT_CONFIG_PATH;
  const env = options.env ?? process.env;
  const raw = new Map<string, RawValue>();

  for (const spec of CONFIG_KEYS) {
    if (spec.default !== undefined) raw.set(spec.key, { value: spec.default, source: { kind: 'default' } });
  }

  const fileFound = readConfigFile(path, options.configPath !== undefined, raw);

  for (const spec of CONFIG_KEYS) {
    for (const name of envNames(spec)) {
      const v = env[name];
      if (v !== undefined && v !== '') {
        raw.set(spec.key, { value: v, source: { kind: 'env', name } });
        break;
      }
    }
  }

  for (const [key, v] of Object.entries(options.flags ?? {})) {
    const spec = SPEC_BY_KEY.get(key);
    if (!spec) throw new Error(`internal: flag for unknown config key ${key}`);
    if (v !== undefined) raw.set(key, { value: v, source: { kind: 'flag', name: spec.flag ?? key } });
  }

  const where = (key: string) => {
    const r = raw.get(key);
    return r ? describeSource(r.source) : path;
  };

  for (const spec of CONFIG_KEYS) {
    if (!spec.required) continue;
    const r = raw.get(spec.key);
    if (r === undefined || r.value === '' || r.value === null) {
      if (options.unneeded?.includes(spec.key)) {
        raw.set(spec.key, { value: '', source: { kind: 'default' } });
        continue;
      }
      const ways = [fileFound ? path : `${path} (not found)`, envNames(spec)[0]];
      if (spec.flag) ways.push(`--${spec.flag}`);
      // Says how to set it either way: the example config ships node_id empty on purpose.
      throw configError(`${spec.key} is required (set it in ${ways.join(', ')})`);
    }
  }

  const parsed = new Map<string, unknown>();
  for (const spec of CONFIG_KEYS) {
    const r = raw.get(spec.key);
    parsed.set(spec.key, r === undefined ? undefined : parseConfigValue(spec, r));
  }

  const config = assemble(parsed);
  checkConfigCrossKeys(config, where);

  const sources = new Map<string, ValueSource>();
  const values = new Map<string, unknown>();
  for (const [key, r] of raw) {
    sources.set(key, r.source);
    values.set(key, r.value);
  }
  return { config, sources, values, path, fileFound };
}

/** Each parsed value at its camelCase place in AgentConfig (camelPath), so the table alone decides the shape. */
function assemble(parsed: Map<string, unknown>): AgentConfig {
  const out: Record<string, unknown> = {};
  for (const spec of CONFIG_KEYS) {
    const path = camelPath(spec);
    let target = out;
    for (const part of path.slice(0, -1)) {
      target[part] ??= {};
      target = target[part] as Record<string, unknown>;
    }
    target[path[path.length - 1] as string] = parsed.get(spec.key);
  }
  return out as unknown as AgentConfig;
}
