import { describe, it } from 'vitest';
import { stateAndDiskScenarios } from './scenarios/state-and-disk.js';
import { runScenario } from './scenarios/fault-harness.js';

// tmpfs and bind mounts need root; the agent in production runs as root too.
const root = process.getuid?.() === 0;

describe('state files and disks that go bad', () => {
  for (const s of stateAndDiskScenarios) {
    it.runIf(root || !/disk|read-only/.test(s.name))(s.title, async () => {
      const { outcome } = await runScenario(s);
      if (outcome.hit) console.info(`${s.name}: ${outcome.hit}`);
    }, s.timeoutMs);
  }
});
