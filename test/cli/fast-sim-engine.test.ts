import { describe, expect, it } from 'vitest';
import SimEngine from '../../src/commands/sim/engine.js';
import { simEngineOptions } from '../../src/cli/fast-sim-engine.js';
import { SIM_DEFAULTS } from '../../src/sim/sim-engine-options.js';

describe("sim engine's command line read without oclif", () => {
  it('knows every flag the oclif command declares, and no other', () => {
    // A flag added to the command and not here would send every start through oclif: slower, never wrong;
    // one here and not there would accept what the command refuses.
    const declared = Object.keys(SimEngine.flags).sort();
    const read = declared.filter((name) => {
      const flag = SimEngine.flags[name as keyof typeof SimEngine.flags] as { type: string };
      // A value each kind reads: a number, a duration or a string.
      const tries = flag.type === 'boolean' ? [[`--${name}`]] : ['1', '1s', 'x:1'].map((v) => [`--${name}`, v]);
      if (name === 'fragile-worker') tries[0]?.push('--spawn-child');
      return tries.some((argv) => simEngineOptions(argv) !== undefined);
    });
    expect(read).toEqual(declared);
    expect(simEngineOptions(['--log-level', 'debug'])).toBeUndefined();
  });

  it('reads what the agent passes, the last --host winning as in vLLM', () => {
    expect(
      simEngineOptions(['--host', '0.0.0.0', '--port', '8001', '--model', 'm', '--load-time', '1.5s', '--token-latency', '20ms', '--host', '127.0.0.1', '--stall-after', '3s', '--worker']),
    ).toEqual({
      ...SIM_DEFAULTS,
      host: '127.0.0.1',
      port: 8001,
      model: 'm',
      loadTimeMs: 1500,
      tokenLatencyMs: 20,
      stallAfterMs: 3000,
      neverReady: false,
      ignoreSigterm: false,
      spawnChild: false,
      fragileWorker: false,
      spawnEscapingChild: false,
      worker: true,
    });
    expect(simEngineOptions([])?.port).toBe(SIM_DEFAULTS.port);
  });

  it.each([
    ['help', ['--help']],
    ['an unknown flag', ['--nope']],
    ['a positional', ['serve']],
    ['a duration it cannot read', ['--load-time', 'soon']],
    ['a port out of range', ['--port', '70000']],
    ['a negative integer', ['--max-tokens', '-1']],
    ['a log rate of 0', ['--log-rate', '0']],
    ['an exit code over 255', ['--exit-code', '256']],
    ['--fragile-worker without --spawn-child', ['--fragile-worker']],
    ['a value missing', ['--port']],
  ])('leaves %s to oclif, which says what is wrong', (_what, argv) => {
    expect(simEngineOptions(argv)).toBeUndefined();
  });
});
