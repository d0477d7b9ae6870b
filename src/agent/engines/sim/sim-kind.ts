import type { EngineKind } from '../engine-kind.js';
import { SimEngine } from './sim-engine.js';

/** The sim's wing, as the catalog knows it: off unless engines.sim.enabled, and it compiles nothing. */
export const SIM_KIND: EngineKind = {
  create: (config, ctx) => new SimEngine(config, ctx.mgmtInterface),
  enabledByDefault: false,
  compileDirs: [],
};
