import { agentKilledScenarios } from './agent-killed.js';
import { controlMessageScenarios } from './control-messages.js';
import { controlPlaneScenarios } from './control-plane-faults.js';
import { engineScenarios } from './engine-faults.js';
import type { Scenario } from './fault-harness.js';
import { stateAndDiskScenarios } from './state-and-disk.js';

/** Every scenario of the campaign, in the order the soak table lists them. */
export const allScenarios: Scenario[] = [
  ...agentKilledScenarios,
  ...controlPlaneScenarios,
  ...controlMessageScenarios,
  ...stateAndDiskScenarios,
  ...engineScenarios,
];
