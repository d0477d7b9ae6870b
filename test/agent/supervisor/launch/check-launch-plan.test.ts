import { describe, expect, it } from 'vitest';
import { MAX_ARG_STRLEN, checkLaunchPlan } from '../../../../src/agent/supervisor/launch/check-launch-plan.js';
import { Supervisor } from '../../../../src/agent/supervisor/supervisor.js';
import { processesWritingUnder, removeDir, shardSpec, simPlan, tempDirs, testConfig } from '../../../helpers/engine-processes.js';

describe('checkLaunchPlan', () => {
  it('accepts an ordinary engine command', () => {
    expect(() => checkLaunchPlan({ argv: ['vllm', 'serve', 'm', '--port', '8000'], env: { A: '1' } }, { A: '1', PATH: '/bin' })).not.toThrow();
  });

  it('refuses 10,000 arguments, saying how many there are and how many are allowed', () => {
    const argv = ['vllm', ...Array.from({ length: 10_000 }, (_, i) => `--a${i}`)];
    expect(() => checkLaunchPlan({ argv, env: {} }, {})).toThrow('the engine command has 10000 arguments; at most 4096 are accepted');
  });

  it('refuses a 1 MiB environment value by name, before execve would fail with E2BIG', () => {
    const big = 'x'.repeat(1024 * 1024);
    expect(() => checkLaunchPlan({ argv: ['vllm'], env: { BIG: big } }, { BIG: big })).toThrow(/^environment variable BIG is 1048576 bytes; the kernel takes at most/);
  });

  it('refuses one argument longer than MAX_ARG_STRLEN, by position', () => {
    expect(() => checkLaunchPlan({ argv: ['vllm', 'x'.repeat(MAX_ARG_STRLEN)], env: {} }, {})).toThrow(/^engine argument 1 is 131072 bytes/);
  });

  it('refuses arguments and environment that together do not fit in one exec', () => {
    const env = Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`V${i}`, 'x'.repeat(100_000)]));
    expect(() => checkLaunchPlan({ argv: ['vllm'], env }, env)).toThrow(/arguments and environment take \d+ bytes; at most \d+ fit in one exec/);
  });
});

describe('Supervisor.start with a plan the kernel would refuse', () => {
  it('throws the reason and launches nothing', async () => {
    const dirs = tempDirs();
    const sup = new Supervisor({ config: testConfig(dirs) });
    try {
      const plan = simPlan(['--worker']);
      plan.env.HUGE = 'y'.repeat(1024 * 1024);
      await expect(sup.start(shardSpec('huge-env'), { plan: plan, servesHttp: false })).rejects.toThrow(/environment variable HUGE is 1048576 bytes/);
      expect(sup.list()).toEqual([]);
      expect(processesWritingUnder(dirs.root)).toEqual([]);
    } finally {
      sup.close();
      removeDir(dirs.root);
    }
  });
});
