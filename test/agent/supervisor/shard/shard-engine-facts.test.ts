import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ShardEngineFacts } from '../../../../src/agent/supervisor/shard/shard-engine-facts.js';
import { StateFileWriter } from '../../../../src/agent/supervisor/shard/state-file-writer.js';
import { readStateFile, writeStateFile } from '../../../../src/lib/files/state-file.js';
import { parseShardId } from '../../../../src/lib/shard-id.js';
import { captureLogger } from '../../../helpers/capture-logger.js';
import { sampleStateFile } from '../../../helpers/sample-state-file.js';

/*
 * What a runner learns of its engine and keeps: its version (vLLM's GET
 * /version, answered here by a real HTTP server on a real socket) and the
 * host RAM it pins from its first sleep, both recorded in the state file.
 */

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0)) c();
});

/** A /version endpoint that answers `body` with `status`, counting the asks; each answer waits for `gate` when set. */
async function versionServer(status: number, body: string, gate?: Promise<void>) {
  const seen = { asks: 0 };
  const server: Server = createServer(async (req, res) => {
    seen.asks++;
    if (gate) await gate;
    res.writeHead(req.url === '/version' ? status : 404, { 'content-type': 'application/json' }).end(body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanups.push(() => server.close());
  return { baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

async function facts(baseUrl: string, recorded: { engineVersion?: string; hostCopyMib?: number } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-engine-facts-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 's0.json');
  await writeStateFile(path, sampleStateFile());
  const { logger, records } = captureLogger();
  const stateFile = new StateFileWriter(path, parseShardId('s0'), logger);
  const f = new ShardEngineFacts({ engine: 'vllm', baseUrl, apiKey: '', stateFile, log: logger, fields: { shard: 's0' }, pid: 4242 }, recorded);
  const file = async () => {
    const r = await readStateFile(path, 's0');
    if (!r.ok) throw new Error(r.reason);
    return r.file;
  };
  return { f, records, file };
}

describe('ShardEngineFacts', () => {
  it('reads the version once, records it, and answers from it afterwards', async () => {
    const { baseUrl, seen } = await versionServer(200, '{"version":"0.9.1"}');
    const { f, file } = await facts(baseUrl);
    expect(f.version).toBeUndefined();
    expect(await f.read(new AbortController().signal)).toBe('0.9.1');
    expect(await f.read(new AbortController().signal)).toBe('0.9.1');
    expect([f.version, seen.asks, (await file()).engineVersion, f.pid]).toEqual(['0.9.1', 1, '0.9.1', 4242]);
  });

  it('shares one ask among callers that ask together', async () => {
    let open = () => {};
    const { baseUrl, seen } = await versionServer(200, '{"version":"0.9.1"}', new Promise<void>((r) => { open = r; }));
    const { f } = await facts(baseUrl);
    const both = Promise.all([f.read(new AbortController().signal), f.read(new AbortController().signal)]);
    open();
    expect(await both).toEqual(['0.9.1', '0.9.1']);
    expect(seen.asks).toBe(1);
  });

  it('asks nothing of an engine whose version was recorded (an adopted one), nor of one with no HTTP', async () => {
    const { baseUrl, seen } = await versionServer(200, '{"version":"0.9.1"}');
    expect(await (await facts(baseUrl, { engineVersion: '0.8.0' })).f.read(new AbortController().signal)).toBe('0.8.0');
    expect(await (await facts('')).f.read(new AbortController().signal)).toBeUndefined();
    expect(seen.asks).toBe(0);
  });

  it('says undefined and logs why for an answer that is not a version, and asks again next time', async () => {
    const { baseUrl, seen } = await versionServer(200, '{"version":"<script>"}');
    const { f, records, file } = await facts(baseUrl);
    expect(await f.read(new AbortController().signal)).toBeUndefined();
    expect(await f.read(new AbortController().signal)).toBeUndefined();
    expect(seen.asks).toBe(2);
    expect(records.filter((r) => r.msg === "the engine's version could not be read; sleeps that need it are refused").map((r) => r.why)).toEqual(['GET /version gave no version', 'GET /version gave no version']);
    expect((await file()).engineVersion).toBeUndefined();
  });

  it('records the host RAM pinned at the first sleep, and keeps that figure', async () => {
    const { f, file } = await facts('');
    expect(f.hostCopyMib).toBeUndefined();
    await f.hostCopyPinned(512);
    await f.hostCopyPinned(900);
    expect([f.hostCopyMib, (await file()).hostCopyMib]).toEqual([512, 512]);
    const adopted = await facts('', { hostCopyMib: 300 });
    await adopted.f.hostCopyPinned(512);
    expect(adopted.f.hostCopyMib).toBe(300);
  });
});
