import { describe, it } from 'vitest';
import { controlMessageScenarios } from './scenarios/control-messages.js';
import { runScenario } from './scenarios/fault-harness.js';

describe('bad control messages', () => {
  for (const s of controlMessageScenarios) {
    it(s.title, async () => {
      await runScenario(s);
    }, s.timeoutMs);
  }
});
