import { describe, it } from 'vitest';
import { controlPlaneScenarios } from './scenarios/control-plane-faults.js';
import { runScenario } from './scenarios/fault-harness.js';

/** `npm run soak` runs these same scenarios many times; here each runs once. */
describe('a control plane that dies, hangs or talks nonsense', () => {
  for (const s of controlPlaneScenarios) {
    it(s.title, async () => {
      const { outcome } = await runScenario(s);
      if (outcome.dataLost !== 0) throw new Error(`${outcome.dataLost} requests failed (${outcome.hit ?? ''})`);
      if (outcome.hit) console.info(`${s.name}: ${outcome.hit}`);
    }, s.timeoutMs);
  }
});
