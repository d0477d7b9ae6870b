import { describe, it } from 'vitest';
import { engineScenarios } from './scenarios/engine-faults.js';
import { runScenario } from './scenarios/fault-harness.js';

describe('engines that crash, daemonize or never open their port', () => {
  for (const s of engineScenarios) {
    it(s.title, async () => {
      await runScenario(s);
    }, s.timeoutMs);
  }
});
