import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import type { Register } from '../../src/gen/llmgw/v1/agent_pb.js';
import { agentDirs, cleanUpEnginesAfterTest, startAgentProcess } from '../helpers/agent-process.js';
import { runCli } from '../helpers/run-cli.js';
import { isRegister } from '../helpers/sim-shards.js';
import { startControlPlane } from '../helpers/start-control-plane.js';

/*
 * Issue 52, item 5, through the real agent: the rates it measured (kept in
 * its warmth file across restarts) go out in Inventory.rates with Register,
 * and `ctl status` shows them, --json and human.
 */

const MiB = 1024 * 1024;

describe("the node's measured rates", () => {
  it('are reported with Register and shown by ctl status after a restart, each with its source', async () => {
    const { cp, url } = await startControlPlane();
    onTestFinished(() => cp.close());
    const dirs = agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-rates-agent-')));
    onTestFinished(() => rmSync(dirs.root, { recursive: true, force: true }));
    cleanUpEnginesAfterTest(dirs);
    mkdirSync(dirs.stateDir, { recursive: true, mode: 0o700 });
    // What an earlier agent kept: a pull and a cold warm (the probe's rate is its own, a minute after start).
    const atMs = Date.now() - 3_600_000;
    writeFileSync(join(dirs.stateDir, 'warmth.json'), JSON.stringify({ version: 1, entries: [], rates: { hub: { bytes: 256 * MiB, ms: 2000, atMs }, disk: { bytes: 512 * MiB, ms: 500, atMs } } }), { mode: 0o600 });
    startAgentProcess({ server: url, dirs });
    const register = (await cp.waitFor('node-a', isRegister, 20_000)).msg.value as Register;
    expect(register.inventory?.rates?.lastPull).toMatchObject({ bytesPerSecond: 128 * MiB, source: 'pull' });
    expect(register.inventory?.rates?.diskRead).toMatchObject({ bytesPerSecond: 1024 * MiB, source: 'warm' });
    expect(register.inventory?.rates?.diskWrite).toBeUndefined();
    const json = JSON.parse((await runCli(['ctl', 'status', '--json', '--socket', dirs.socket])).stdout);
    expect(json.inventory.rates.lastPull).toMatchObject({ bytesPerSecond: 128 * MiB, bytes: String(256 * MiB), source: 'pull' });
    const human = (await runCli(['ctl', 'status', '--socket', dirs.socket])).stdout;
    expect(human).toMatch(/^rates {6}disk write not measured, disk read 1 GiB\/s \(warm, 1h[0-9ms]* ago\), last pull 128 MiB\/s \(pull, 1h[0-9ms]* ago\)$/m);
  }, 60_000);
});
