import { loadAgentConfig } from '../agent/config/load-agent-config.js';
import { type ModelStore, modelStoreFromConfig } from '../models/model-store-options.js';
import { assertTrustedStore } from '../models/store-trust.js';

/** The store of the agent's configuration file (--config, else /etc/llmgw/agent.yaml and LLMGW_* variables). */
export function loadModelStore(configPath: string | undefined): ModelStore {
  // A store command never talks to the control plane: a config without server or node_id serves it.
  const { config, path } = loadAgentConfig({ configPath, unneeded: ['server', 'node_id'] });
  const store = modelStoreFromConfig(config.models, path);
  // As the agent does at its start: an operator's root command in a store the engine account could steer is S1's way in.
  assertTrustedStore(store.layout.cacheDir);
  return store;
}
