import { describe, expect, it } from 'vitest';
import { chooseLauncher, type LauncherProbe } from '../../../../src/agent/supervisor/launch/choose-launcher.js';

const probe = (over: Partial<LauncherProbe>): LauncherProbe => ({
  booted: () => true,
  uid: () => 0,
  systemState: async () => 'running',
  ...over,
});

describe('chooseLauncher', () => {
  it('uses a configured launcher as it is, without asking systemd', async () => {
    const asked: string[] = [];
    const p = probe({
      booted: () => {
        asked.push('booted');
        return true;
      },
    });
    expect(await chooseLauncher('direct', p)).toEqual({ launcher: 'direct', why: 'supervisor.launcher is direct' });
    expect(await chooseLauncher('systemd-run', p)).toMatchObject({ launcher: 'systemd-run' });
    expect(asked).toEqual([]);
  });

  it('auto picks systemd-run when systemd runs and answers and the agent is root', async () => {
    expect(await chooseLauncher('auto', probe({}))).toMatchObject({ launcher: 'systemd-run', why: expect.stringContaining('running') });
    expect(await chooseLauncher('auto', probe({ systemState: async () => 'degraded' }))).toMatchObject({ launcher: 'systemd-run' });
  });

  it('auto picks direct, saying why, when systemd is not the service manager, the agent is not root, or systemd does not take jobs', async () => {
    expect(await chooseLauncher('auto', probe({ booted: () => false }))).toMatchObject({ launcher: 'direct', why: expect.stringContaining('/run/systemd/system is missing') });
    expect(await chooseLauncher('auto', probe({ uid: () => 1000 }))).toMatchObject({ launcher: 'direct', why: expect.stringContaining('not root') });
    expect(await chooseLauncher('auto', probe({ systemState: async () => 'offline' }))).toMatchObject({ launcher: 'direct', why: expect.stringContaining('"offline"') });
    const silent = probe({ systemState: () => Promise.reject(new Error('spawn systemctl ENOENT')) });
    expect(await chooseLauncher('auto', silent)).toMatchObject({ launcher: 'direct', why: expect.stringContaining('ENOENT') });
  });

  it('auto picks direct on this host, where systemd is installed but not PID 1', async () => {
    // The lab suite (test/systemd/engine-units.test.ts) proves the other half, under a real systemd.
    const choice = await chooseLauncher('auto');
    expect(choice.launcher).toBe('direct');
    expect(choice.why).toMatch(/^auto: /);
  });
});
