import { connect } from 'node:net';
import { describe, expect, it, onTestFinished } from 'vitest';
import { startSimRendezvous } from '../../src/sim/sim-rendezvous.js';
import { freePort, until } from '../helpers/engine-processes.js';

/** The sim's gang rendezvous: ranks that block when a peer goes, and a port probe that is no peer. */
describe('the sim rendezvous', () => {
  it('tells rank 0 when a joined rank goes, and the rank when rank 0 goes; a connection that says nothing is no rank', async () => {
    const port = await freePort();
    const lost = { leader: 0, worker: 0 };
    const lines: string[] = [];
    const log = (_l: string, _w: string, t: string) => void lines.push(t);
    const leader = startSimRendezvous({ addr: `127.0.0.1:${port}`, leader: true, log, onPeerLost: () => void lost.leader++ });
    onTestFinished(() => leader.close());
    const worker = startSimRendezvous({ addr: `127.0.0.1:${port}`, leader: false, log, onPeerLost: () => void lost.worker++ });
    onTestFinished(() => worker.close());
    await until(() => lines.some((l) => l.startsWith('rendezvous: rank joined')), 'the worker to join');

    // The agent's gang watch connects and closes: nothing is lost.
    const probe = connect({ host: '127.0.0.1', port });
    await new Promise((r) => probe.once('connect', r));
    probe.destroy();
    await new Promise((r) => setTimeout(r, 200));
    expect(lost).toEqual({ leader: 0, worker: 0 });

    // Rank 0 goes: the worker hears it (and blocks: it is the caller's to do nothing).
    leader.close();
    await until(() => lost.worker === 1, 'the worker to see rank 0 gone');
    expect(lines.at(-1)).toMatch(/rank 0 at 127\.0\.0\.1:\d+ is gone$/);
  });

  it("tells rank 0 when a joined rank's connection closes", async () => {
    const port = await freePort();
    let lost = 0;
    const log = () => {};
    const leader = startSimRendezvous({ addr: `127.0.0.1:${port}`, leader: true, log, onPeerLost: () => void lost++ });
    onTestFinished(() => leader.close());
    const rank = connect({ host: '127.0.0.1', port });
    await new Promise((r) => rank.once('connect', r));
    // Says it is a rank, then goes.
    rank.end('llmgw-sim-rank\n');
    await until(() => lost === 1, 'rank 0 to see the rank gone');
  });
});
