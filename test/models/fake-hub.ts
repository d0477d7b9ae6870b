/** The hub double moved to src/sim/sim-hub.ts (llmgw dev up serves from it); the tests import it from here as before. */
export * from '../../src/sim/sim-hub.js';
