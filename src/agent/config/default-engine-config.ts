import type { EngineName } from '../../lib/engine-names.js';
import type { EngineConfig } from './agent-config.js';
import { DEFAULT_ALLOWED_ENV } from './env-allowlist.js';

/**
 * An engine's settings when config does not name it. `sim` is a Node.js
 * program of this package: registered on a production node it hands a
 * control plane a Node runtime to aim at, so it is off unless dev or tests
 * turn it on (`engines.sim.enabled: true`).
 */
export function defaultEngineConfig(name: EngineName): EngineConfig {
  return { command: [], env: {}, extraArgs: [], allowedEnv: [...DEFAULT_ALLOWED_ENV], allowedArgs: [], modelRoots: [], allowRoot: false, enabled: name !== 'sim' };
}
