import { loadAgentConfig } from '../agent/config/load-agent-config.js';
import { type ModelStore, modelStoreFromConfig } from './model-store-options.js';

/** The store of the agent's configuration file (--config, else /etc/llmgw/agent.yaml and LLMGW_* variables). */
export function loadModelStore(configPath: string | undefined): ModelStore {
  const { config, path } = loadAgentConfig({ configPath });
  return modelStoreFromConfig(config.models, path);
}
