/**
 * What the rows of figure 14 (warm-start-figures.ts) share: the bench's
 * model, served by a fake hub, the TCP relay that plays a node's link to it,
 * and a shard started to READY or stopped through the control plane.
 */
import { type Server, type Socket, createConnection, createServer } from 'node:net';
import { create } from '@bufbuild/protobuf';
import type { ControlPlane } from '../src/control/control-plane.js';
import { ShardState, type ShardStatus, type StartShard, StopShardSchema } from '../src/gen/llmgw/v1/agent_pb.js';
import { shardIs } from '../test/helpers/sim-shards.js';
import { FakeHub, bytes, fakeRepo } from '../test/models/fake-hub.js';

export const MiB = 1024 * 1024;
export const REPO = 'bench/warm-model';

/**
 * The model: two 64 MiB safetensors shards (LFS, named by sha256) and the
 * small JSON files (git blobs) an engine reads beside them, the tokenizer's
 * among them (an offline vLLM start fails without them, as the double's
 * does), 128 MiB in all; deterministic bytes, so every run serves the same
 * sha256s.
 */
const FILES: readonly { path: string; size: number; lfs: boolean }[] = [
  { path: 'model-00001-of-00002.safetensors', size: 64 * MiB, lfs: true },
  { path: 'model-00002-of-00002.safetensors', size: 64 * MiB, lfs: true },
  { path: 'config.json', size: 700, lfs: false },
  { path: 'generation_config.json', size: 180, lfs: false },
  { path: 'tokenizer_config.json', size: 400, lfs: false },
  { path: 'tokenizer.json', size: 2000, lfs: false },
];

/**
 * A TCP relay in front of the hub whose bytes towards the client share one
 * rate, as a node's link does: every chunk waits for its slot of a single
 * schedule, whatever connection carries it.
 */
export async function throttledLink(targetPort: number, bytesPerS: number): Promise<{ url: string; close: () => Promise<void> }> {
  let nextFreeMs = 0;
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = createConnection({ host: '127.0.0.1', port: targetPort });
    sockets.add(client).add(upstream);
    client.pipe(upstream);
    // The hub's end is passed on after the bytes still waiting for their slot, not before them:
    // the pull's requests say Connection: close, and an early end cut every answer short.
    let waiting = 0;
    let upstreamEnded = false;
    upstream.on('data', (chunk: Buffer) => {
      const now = performance.now();
      const at = Math.max(now, nextFreeMs);
      nextFreeMs = at + (chunk.length / bytesPerS) * 1000;
      // A chunk whose slot is (nearly) now goes at once: a timer per chunk, at least 1 ms each, held
      // one connection to some 50 MB/s whatever the link's rate, favouring a client of many connections.
      if (at - now < 2) {
        client.write(chunk);
        return;
      }
      upstream.pause();
      waiting++;
      setTimeout(() => {
        waiting--;
        if (client.destroyed) return;
        client.write(chunk);
        upstream.resume();
        if (upstreamEnded && waiting === 0) client.end();
      }, at - now);
    });
    const end = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    upstream.on('end', () => {
      upstreamEnded = true;
      if (waiting === 0) client.end();
    });
    upstream.on('error', end);
    client.on('error', end);
    client.on('close', end);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}`,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

export async function startHub(): Promise<FakeHub> {
  const hub = new FakeHub();
  const files = FILES.map((f, i) => ({ path: f.path, content: f.lfs ? bytes(f.size, 100 + i) : Buffer.from(`{"bench":"${'x'.repeat(f.size - 13)}"}\n`), lfs: f.lfs }));
  hub.repos.set(REPO, fakeRepo(REPO, files));
  await hub.start();
  return hub;
}

export const modelBytes = () => FILES.reduce((s, f) => s + f.size, 0);

/** Sends `start` and resolves with READY's status and the time it took; throws with the agent's reason otherwise. */
export async function startToReady(cp: ControlPlane, start: StartShard, before?: () => void): Promise<{ status: ShardStatus; tookMs: number }> {
  const ready = cp.waitFor('node-a', shardIs(start.shardId, ShardState.READY, ShardState.FAILED), 180_000);
  const t0 = performance.now();
  before?.();
  cp.send('node-a', { case: 'start', value: start });
  const status = (await ready).msg.value as ShardStatus;
  const tookMs = performance.now() - t0;
  if (status.state !== ShardState.READY) throw new Error(`shard ${start.shardId} did not become READY: ${status.error}`);
  return { status, tookMs };
}

export async function stopShard(cp: ControlPlane, id: string): Promise<void> {
  const stopped = cp.waitFor('node-a', shardIs(id, ShardState.STOPPED, ShardState.FAILED), 60_000);
  cp.send('node-a', { case: 'stop', value: create(StopShardSchema, { shardId: id }) });
  await stopped;
}
