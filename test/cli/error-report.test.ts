import { describe, expect, it } from 'vitest';
import { errorLine } from '../../src/cli/error-report.js';
import { runCli } from '../helpers/run-cli.js';

describe('errorLine', () => {
  it("escapes control characters in another party's text, line breaks included", () => {
    expect(errorLine({ kind: 'failure', message: 'engine said: boom\n\u001b[2J', exitCode: 1 }, {})).toBe('error: engine said: boom\\x0a\\x1b[2J\n');
  });

  it("keeps the line breaks of the CLI's own text, and still escapes the rest", () => {
    expect(errorLine({ kind: 'usage', message: 'Nonexistent flag: --\u001b[2J\nSee more help with --help', exitCode: 2 }, {}, { ownText: true })).toBe(
      'error: Nonexistent flag: --\\x1b[2J\nSee more help with --help\n',
    );
  });
});

describe("oclif's own messages", () => {
  it('print on one line, naming the command whose --help to read', async () => {
    const missing = await runCli(['models', 'rm']);
    expect(missing.exitCode).toBe(2);
    expect(missing.stderr).toBe('error: Missing 1 required arg: repo, hub model or adapter id, org/name, as models list shows it; see `llmgw models rm --help`');
    const flag = await runCli(['ctl', 'logs', 'x', '--json']);
    expect(flag.exitCode).toBe(2);
    expect(flag.stderr).toBe('error: Nonexistent flag: --json; see `llmgw ctl logs --help`');
  });

  it('escape what was typed, never the line breaks they no longer have', async () => {
    const r = await runCli(['ctl', 'logs', 'x', '--\u001b[2J']);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toBe('error: Nonexistent flag: --\\x1b[2J; see `llmgw ctl logs --help`');
  });

  it("name the flag in oclif's integer checks", async () => {
    const r = await runCli(['ctl', 'logs', 'x', '-n', '-1']);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toBe('error: --lines: Expected an integer greater than or equal to 0 but received: -1');
  });

  it("keep a flag parser's own message on one line", async () => {
    const r = await runCli(['ctl', 'drain', 'x', '--timeout', '5x']);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toBe('error: --timeout "5x" is not a duration; write it like 500ms, 5s or 2m');
  });
});
