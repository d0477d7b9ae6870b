import { loadAgentConfig } from '../agent/config/load-agent-config.js';
import { type ModelStore, modelStoreFromConfig } from '../models/model-store-options.js';
import { assertTrustedStore } from '../models/store-trust.js';

/** The store of the agent's configuration file (--config, else /etc/llmgw/agent.yaml and LLMGW_* variables). */
export function loadModelStore(configPath: string | undefined): ModelStore {
  const { config, path } = loadAgentConfig({ configPath });
  const store = modelStoreFromConfig(config.models, path);
  // As the agent does at its start: an operator's root command in a store the engine account could steer is S1's way in.
  assertTrustedStore(store.layout.cacheDir);
  return store;
}
