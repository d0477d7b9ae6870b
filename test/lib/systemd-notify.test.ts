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

  it('stays silent when systemd asked for no watchdog', () => {
    const stop = startWatchdog(() => true, { NOTIFY_SOCKET: '/nonexistent' });
    stop();
    expect(typeof stop).toBe('function');
  });
});
