import { describe, it } from 'vitest';
import { agentKilledScenarios } from './scenarios/agent-killed.js';
import { runScenario } from './scenarios/fault-harness.js';

/** `npm run soak` runs these same scenarios many times; here each runs once. */
describe('agent SIGKILLed at every phase, then restarted', () => {
  for (const s of agentKilledScenarios) {
    for (let run = 1; run <= (s.testRuns ?? 1); run++) {
      it(`${s.title}${run > 1 ? ` (run ${run})` : ''}`, async () => {
        const { outcome } = await runScenario(s);
        if (outcome.dataLost !== 0) throw new Error(`${outcome.dataLost} requests or reports lost`);
      }, s.timeoutMs);
    }
  }
});
