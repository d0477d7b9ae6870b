import { describe, expect, it } from 'vitest';
import { SerialWrites } from '../../../src/lib/files/serial-writes.js';
import { deferred } from '../../helpers/deferred.js';

/*
 * The queue every state file's owner writes through (ledgers, claims,
 * answers, shard state files): one write at a time, in order, and after
 * close() none, with close() ending only once the last asked has.
 */

/** A write that ends when the test says so, recording when it starts and ends. */
function heldWrite(log: string[], name: string) {
  const ended = deferred<void>();
  return {
    write: async () => {
      log.push(`start ${name}`);
      await ended.promise;
      log.push(`end ${name}`);
    },
    end: () => ended.resolve(),
  };
}

/** Whether a write asked once `before` has resolved runs. */
async function runsAfter(before: (w: SerialWrites) => Promise<void>): Promise<boolean> {
  const w = new SerialWrites();
  await before(w);
  let ran = false;
  await w.queue(async () => {
    ran = true;
  });
  return ran;
}

describe('SerialWrites', () => {
  it('runs one write at a time, in the order asked', async () => {
    const log: string[] = [];
    const w = new SerialWrites();
    const a = heldWrite(log, 'a');
    const b = heldWrite(log, 'b');
    void w.queue(a.write);
    const last = w.queue(b.write);
    await Promise.resolve();
    expect(log).toEqual(['start a']);
    a.end();
    b.end();
    await last;
    expect(log).toEqual(['start a', 'end a', 'start b', 'end b']);
  });

  it('hands a failed write to onError and runs the next one', async () => {
    const errors: unknown[] = [];
    const w = new SerialWrites((err) => errors.push(err));
    let ran = false;
    void w.queue(async () => {
      throw new Error('EACCES');
    });
    await w.queue(async () => {
      ran = true;
    });
    expect(errors.map((e) => (e as Error).message)).toEqual(['EACCES']);
    expect(ran).toBe(true);
  });

  it('close() resolves only once the write in flight has ended', async () => {
    const log: string[] = [];
    const w = new SerialWrites();
    const a = heldWrite(log, 'a');
    void w.queue(a.write);
    let closed = false;
    const closing = w.close().then(() => (closed = true));
    // Turns of the event loop, not a clock: the write is held until the test ends it.
    await new Promise((r) => setImmediate(r));
    expect(closed).toBe(false);
    a.end();
    await closing;
    expect(log).toEqual(['start a', 'end a']);
  });

  it('starts no write asked after close(), and says so by resolving at once', async () => {
    expect(await runsAfter((w) => w.close())).toBe(false);
  });

  it('settled() waits like close() but lets later writes run: it is not a close', async () => {
    expect(await runsAfter((w) => w.settled())).toBe(true);
  });
});
