import { describe, expect, it } from 'vitest';
import { runCli } from '../../helpers/run-cli.js';

describe('llmgw sim engine (command)', () => {
  it('documents itself with examples', async () => {
    const r = await runCli(['sim', 'engine', '--help']);
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toMatch(/simulated inference engine/);
    expect(r.stdout).toMatch(/EXAMPLES/);
    expect(r.stdout).toMatch(/--fail-after/);
  });

  it('refuses a duration it cannot read, with exit 2 and the value shown', async () => {
    const r = await runCli(['sim', 'engine', '--load-time', 'soon']);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toMatch(/"soon" is not a duration/);
  });
});
