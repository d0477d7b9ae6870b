import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it, onTestFinished } from 'vitest';
import { agentConfigYaml, agentDirs } from '../helpers/agent-config-yaml.js';
import { freePort } from '../helpers/engine-processes.js';
import { AGENT_UNIT, bootLab, installAgentUnit, labUnavailableReason, stopAllLabs, type SystemdLab } from '../helpers/systemd-lab.js';

/*
 * The agent's log lines as journald files them: the packaged unit under the
 * lab's systemd with StandardError=journal and a real systemd-journald
 * started inside the lab (its socket and service, the image's binary), then
 * `journalctl -p warning` asked for the agent's warnings. Each line's
 * sd-daemon prefix is what sets its PRIORITY; without it every line is 6.
 */

const unavailable = await labUnavailableReason();

afterAll(async () => {
  await stopAllLabs();
});

/**
 * journald as the image ships it (systemd-journald.socket verbatim), its
 * service reduced to what runs in the lab: the image's unit asks for a
 * sandbox (SystemCallFilter, ProtectClock, ...) and the audit and /dev/log
 * sockets, none of which the lab needs to file a unit's stderr.
 */
async function startJournald(lab: SystemdLab): Promise<void> {
  const units = `/proc/${lab.pid}/root/run/systemd/system`;
  copyFileSync('/lib/systemd/system/systemd-journald.socket', join(units, 'systemd-journald.socket'));
  writeFileSync(
    join(units, 'systemd-journald.service'),
    [
      '[Unit]',
      'Description=Journal Service (systemd-lab)',
      'DefaultDependencies=no',
      'Requires=systemd-journald.socket',
      'After=systemd-journald.socket',
      '[Service]',
      'Type=notify',
      'ExecStart=/lib/systemd/systemd-journald',
      'Sockets=systemd-journald.socket',
      'RuntimeDirectory=systemd/journal',
      'RuntimeDirectoryPreserve=yes',
      'StandardOutput=null',
      '',
    ].join('\n'),
  );
  expect((await lab.run(['systemctl', 'daemon-reload'])).exitCode).toBe(0);
  const started = await lab.run(['systemctl', 'start', 'systemd-journald.socket', 'systemd-journald.service']);
  expect(started.stderr).toBe('');
  expect(started.exitCode).toBe(0);
}

async function journal(lab: SystemdLab, ...args: string[]): Promise<string> {
  return String((await lab.run(['journalctl', '--no-pager', '-u', AGENT_UNIT, ...args])).stdout);
}

describe.skipIf(unavailable !== undefined)('the agent under systemd, logging to the journal', () => {
  it('files its warnings at PRIORITY 4, so journalctl -p warning shows them and not its info lines', { timeout: 120_000 }, async () => {
    const root = mkdtempSync(join(tmpdir(), 'llmgw-journal-'));
    const lab = await bootLab({ logFile: join(root, 'systemd-lab-boot.log') });
    onTestFinished(async () => {
      await lab.stop();
      rmSync(root, { recursive: true, force: true });
    });
    await startJournald(lab);

    // A control plane nobody listens on: the agent warns 'cannot reach the control plane; retrying'.
    const dirs = agentDirs(root);
    const configPath = join(root, 'agent.yaml');
    const nobody = await freePort();
    writeFileSync(configPath, agentConfigYaml({ server: `http://127.0.0.1:${nobody}`, dirs }).replace('\nsupervisor:\n', '\nsupervisor:\n  launcher: direct\n').replace('log_level: debug', 'log_level: info'));
    const dropIn = ['[Service]', 'StandardOutput=journal', 'StandardError=journal', 'TimeoutStartSec=30s', 'TimeoutStopSec=5s', ''].join('\n');
    const { installed, reloaded } = await installAgentUnit(lab, { configPath, dropIn });
    expect(installed.exitCode).toBe(0);
    expect(reloaded.exitCode).toBe(0);
    const started = await lab.run(['systemctl', 'start', AGENT_UNIT], { timeoutMs: 60_000 });
    expect(started.exitCode, String(started.stderr)).toBe(0);

    let warnings = '';
    for (let i = 0; i < 100 && !warnings.includes('cannot reach the control plane'); i++) {
      await sleep(200);
      warnings = await journal(lab, '-p', 'warning', '-o', 'cat');
    }
    const all = await journal(lab, '-o', 'cat');
    console.info(`journalctl -u ${AGENT_UNIT} -p warning -o cat:\n${warnings}`);
    // The info lines are in the journal, at their own priority.
    expect(all).toContain('"msg":"agent starting"');
    expect(warnings).toContain('"level":"warn"');
    expect(warnings).toContain('cannot reach the control plane; retrying');
    expect(warnings).not.toContain('"level":"info"');
    expect(warnings).not.toContain('agent starting');

    // journald took the prefix off and kept it as the record's PRIORITY.
    const records = (await journal(lab, '-o', 'json')).trim().split('\n').map((l) => JSON.parse(l) as { PRIORITY: string; MESSAGE: string });
    const warning = records.find((r) => r.MESSAGE.includes('cannot reach the control plane'));
    const info = records.find((r) => r.MESSAGE.includes('"msg":"agent starting"'));
    expect(warning?.PRIORITY).toBe('4');
    expect(info?.PRIORITY).toBe('6');
    expect(warning?.MESSAGE.startsWith('{')).toBe(true);

    // A fatal configuration error (exit 78) is filed at PRIORITY 3 as JSON too (walkthrough 3, item 3):
    // journalctl -p err names it, and journalctl -o cat | jq reads every line.
    expect((await lab.run(['systemctl', 'stop', AGENT_UNIT], { timeoutMs: 60_000 })).exitCode).toBe(0);
    writeFileSync(configPath, readFileSync(configPath, 'utf8').replace(/^server: .*$/m, 'server: ftp://127.0.0.1:1'));
    await lab.run(['systemctl', 'start', AGENT_UNIT], { timeoutMs: 60_000 });
    let errors = '';
    for (let i = 0; i < 100 && !errors.includes('server'); i++) {
      await sleep(200);
      errors = await journal(lab, '-p', 'err', '-o', 'cat');
    }
    const fatal = errors.trim().split('\n').map((l) => JSON.parse(l) as { level: string; msg: string; exitCode: number }).find((r) => r.exitCode === 78);
    expect(fatal).toMatchObject({ level: 'error', msg: expect.stringContaining('server') });
    for (const line of (await journal(lab, '-o', 'cat')).trim().split('\n')) expect(() => JSON.parse(line), line).not.toThrow();
  });
});
