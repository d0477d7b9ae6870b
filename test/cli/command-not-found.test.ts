import { describe, expect, it } from 'vitest';
import { commandNotFoundMessage } from '../../src/cli/command-not-found.js';
import { runCli } from '../helpers/run-cli.js';

describe('an unknown command', () => {
  it('is named with spaces, as typed, with the nearest command', () => {
    expect(commandNotFoundMessage('ctl:stauts', ['ctl:status', 'ctl:logs', 'discover'])).toBe('unknown command `llmgw ctl stauts`; did you mean `llmgw ctl status`?');
    expect(commandNotFoundMessage('nosuchcmd', ['ctl:status', 'discover'])).toBe('unknown command `llmgw nosuchcmd`; `llmgw --help` lists the commands');
  });

  it('gets one line in llmgw style and exit 2 from the binary', async () => {
    const r = await runCli(['ctl', 'stauts']);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toBe('error: unknown command `llmgw ctl stauts`; did you mean `llmgw ctl status`?');
    expect(r.stdout).toBe('');
  });
});
