import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { sdNotify, startWatchdog } from '../../src/lib/systemd-notify.js';
import { listenNotifySocket } from '../helpers/notify-socket.js';
import { until } from '../helpers/engine-processes.js';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-notify-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('sdNotify', () => {
  it('does nothing outside systemd', async () => {
    expect(await sdNotify('READY=1', { PATH: process.env.PATH })).toBe(false);
  });

  it('sends the state to NOTIFY_SOCKET', async () => {
    const sock = listenNotifySocket(mkdtempSync(join(dir, 'a-')));
    await sock.ready;
    expect(await sdNotify('READY=1', { PATH: process.env.PATH, NOTIFY_SOCKET: sock.path })).toBe(true);
    await until(() => sock.received().some((d) => d.split('\n').includes('READY=1')), 'READY=1 datagram');
  });
});

describe('startWatchdog', () => {
  it('pings at half of WATCHDOG_USEC while healthy, and stops when told', async () => {
    const sock = listenNotifySocket(mkdtempSync(join(dir, 'b-')));
    await sock.ready;
    const stop = startWatchdog(() => true, { PATH: process.env.PATH, NOTIFY_SOCKET: sock.path, WATCHDOG_USEC: '1000000' });
    try {
      await until(() => sock.received().filter((d) => d.includes('WATCHDOG=1')).length >= 2, 'two watchdog pings');
    } finally {
      stop();
    }
  });

  it('sends nothing when systemd asked for no watchdog, or asked another pid, and a stopped one sends nothing more', async () => {
    const sock = listenNotifySocket(mkdtempSync(join(dir, 'c-')));
    await sock.ready;
    const env = { PATH: process.env.PATH, NOTIFY_SOCKET: sock.path };
    const stops = [
      startWatchdog(() => true, env),
      startWatchdog(() => true, { ...env, WATCHDOG_USEC: '0' }),
      startWatchdog(() => true, { ...env, WATCHDOG_USEC: 'soon' }),
      startWatchdog(() => true, { ...env, WATCHDOG_USEC: '1000000', WATCHDOG_PID: String(process.pid + 1) }),
      // Asked for, but unhealthy: a wedged agent must not ping.
      startWatchdog(() => false, { ...env, WATCHDOG_USEC: '1000000' }),
    ];
    // Three times the shortest ping interval (500 ms): a watchdog that ran would have pinged by now.
    await new Promise((r) => setTimeout(r, 1500));
    for (const stop of stops) stop();
    expect(sock.received()).toEqual([]);
    // The socket works: silence above was the watchdog's, not a deaf listener's.
    await sdNotify('STATUS=probe', env);
    await until(() => sock.received().some((d) => d.split('\n').includes('STATUS=probe')), 'STATUS=probe datagram');

    const stop = startWatchdog(() => true, { ...env, WATCHDOG_USEC: '1000000' });
    await until(() => sock.received().some((d) => d.includes('WATCHDOG=1')), 'a watchdog ping');
    stop();
    // A ping already on its way (systemd-notify is a child process) may still land; give it time, then count.
    await new Promise((r) => setTimeout(r, 300));
    const after = sock.received().length;
    await new Promise((r) => setTimeout(r, 1500));
    expect(sock.received().length).toBe(after);
  });
});
