import { createServer } from 'node:net';
import { describe, expect, it, onTestFinished } from 'vitest';
import { findShardPorts } from '../../src/dev/find-shard-ports.js';
import { freePort } from '../helpers/engine-processes.js';

describe('findShardPorts', () => {
  it('starts the range after a port something already listens on', async () => {
    const taken = await freePort();
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(taken, '0.0.0.0', resolve));
    onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const [first, last] = await findShardPorts(2, [taken, taken + 20]);
    expect(first).toBeGreaterThan(taken);
    expect(last).toBe(taken + 20);
  });

  it('says what to do when the range has no room', async () => {
    const taken = await freePort();
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(taken, '0.0.0.0', resolve));
    onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())));
    await expect(findShardPorts(1, [taken, taken])).rejects.toThrow(`no 1 free consecutive ports in ${taken}-${taken} for the engines; stop what listens there and try again`);
  });
});
