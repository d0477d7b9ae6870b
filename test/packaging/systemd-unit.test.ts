import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, describe, expect, it } from 'vitest';
import { BIN, REPO_ROOT } from '../helpers/run-cli.js';

const UNIT = join(REPO_ROOT, 'packaging/llmgw-agent.service');
const text = readFileSync(UNIT, 'utf8');
const dir = mkdtempSync(join(tmpdir(), 'llmgw-unit-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function directive(name: string): string[] {
  return text
    .split('\n')
    .filter((l) => l.startsWith(`${name}=`))
    .map((l) => l.slice(name.length + 1));
}

const haveAnalyze = await execa('systemd-analyze', ['--version'], { reject: false }).then((r) => r.exitCode === 0, () => false);

describe('packaging/llmgw-agent.service', () => {
  it('is a notify service that is restarted, except after a configuration error', () => {
    expect(directive('Type')).toEqual(['notify']);
    // main: engines share the agent's cgroup under the direct launcher and must not speak for it.
    expect(directive('NotifyAccess')).toEqual(['main']);
    expect(directive('Restart')).toEqual(['always']);
    expect(directive('RestartPreventExitStatus')).toEqual(['78']);
    expect(directive('WatchdogSec').length).toBe(1);
  });

  it('keeps engines out of the agent stop, and says why', () => {
    expect(directive('KillMode')).toEqual(['process']);
    const i = text.indexOf('KillMode=process');
    expect(text.slice(Math.max(0, i - 600), i)).toMatch(/outlive an agent restart/);
  });

  it('keeps state, logs and the runtime directory from other users', () => {
    expect(directive('StateDirectoryMode')).toEqual(['0700']);
    expect(directive('LogsDirectoryMode')).toEqual(['0750']);
    expect(directive('RuntimeDirectoryMode')).toEqual(['0750']);
  });

  it.runIf(haveAnalyze)('is accepted by systemd-analyze verify', async () => {
    // verify insists that ExecStart's binary exists; point it at this checkout's.
    const unit = join(dir, 'llmgw-agent.service');
    writeFileSync(unit, text.replace(/^ExecStart=\S+/m, `ExecStart=${BIN}`));
    const r = await execa('systemd-analyze', ['verify', unit], { reject: false });
    expect(r.stderr).toBe('');
    expect(r.exitCode).toBe(0);
  });
});
