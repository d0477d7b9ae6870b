import { createServer, type Server } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { WORKER_PORT_FIRST, chooseWorkerPort } from '../../../src/agent/engines/choose-worker-port.js';
import { isPortFree } from '../../../src/agent/engines/is-port-free.js';

const servers: Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
});

describe('chooseWorkerPort', () => {
  it('skips ports another shard holds and ports something listens on', async () => {
    const first = await chooseWorkerPort(new Map(), isPortFree, undefined);
    expect(first).toBeGreaterThanOrEqual(WORKER_PORT_FIRST);
    const busy = createServer();
    servers.push(busy);
    await new Promise<void>((r) => busy.listen(first, '0.0.0.0', r));
    const next = await chooseWorkerPort(new Map([[(first as number) + 1, 'other-shard']]), isPortFree, undefined);
    expect(next).toBeGreaterThan((first as number) + 1);
  });
  it('never picks a port inside the ephemeral range', async () => {
    const chosen = await chooseWorkerPort(new Map(), async () => true, { low: WORKER_PORT_FIRST, high: WORKER_PORT_FIRST + 9 });
    expect(chosen).toBe(WORKER_PORT_FIRST + 10);
  });
  it('says so when every port is taken', async () => {
    expect(await chooseWorkerPort(new Map(), async () => false, undefined)).toBeUndefined();
  });
});
