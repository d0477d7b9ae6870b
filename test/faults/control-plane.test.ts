import { afterAll, beforeAll, describe, it } from 'vitest';
import { type Booted, bootWithShard, controlPlaneRestartedDuringTraffic, misbehaveOnce, misbehavingControlPlanes } from './scenarios/control-plane-faults.js';
import { FaultHarness, runScenario, type ScenarioOutcome } from './scenarios/fault-harness.js';

/**
 * `npm run soak` runs these same scenarios many times, each on an agent of
 * its own; here each runs once. The misbehaving control planes take turns on
 * one agent: each turn ends with the agent re-registered with its engine
 * unchanged, as it began, and the scenario's invariants checked, so a turn
 * proves what a fresh agent would, without seven agents booted.
 */

function expectNoDataLost(name: string, outcome: ScenarioOutcome): void {
  if (outcome.dataLost !== 0) throw new Error(`${outcome.dataLost} requests failed (${outcome.hit ?? ''})`);
  if (outcome.hit) console.info(`${name}: ${outcome.hit}`);
}

describe('a control plane that dies, hangs or talks nonsense', () => {
  it(controlPlaneRestartedDuringTraffic.title, async () => {
    expectNoDataLost(controlPlaneRestartedDuringTraffic.name, (await runScenario(controlPlaneRestartedDuringTraffic)).outcome);
  }, controlPlaneRestartedDuringTraffic.timeoutMs);

  describe('one agent, each misbehaving control plane in turn', () => {
    const h = new FaultHarness('cp-misbehaving');
    let booted: Booted;
    beforeAll(async () => {
      booted = await bootWithShard(h);
    }, 60_000);
    afterAll(() => h.close(), 60_000);

    for (const s of misbehavingControlPlanes) {
      it(s.title, async () => {
        try {
          expectNoDataLost(s.name, await misbehaveOnce(h, booted, s));
          await h.assertInvariants();
        } catch (err) {
          // What the agent said last is usually the explanation.
          const tail = (h.agent?.logs() ?? []).filter((r) => r.level !== 'debug' && r.level !== 'trace').slice(-15).map((r) => `  ${String(r.msg)}${r.err ? ` err=${String(r.err)}` : ''}`);
          if (err instanceof Error && tail.length > 0) err.message += `\nagent log (last lines):\n${tail.join('\n')}`;
          throw err;
        }
      }, s.timeoutMs);
    }
  });
});
