import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, onTestFinished } from 'vitest';
import { NftPortGuard } from '../../src/lib/net/nft-port-guard.js';
import { claimAgentNftTable } from './nft.js';

/*
 * The suite's teardown of the agent's nftables table (test/global-setup.ts,
 * claimAgentNftTable): removed only when this run made it, with the real nft
 * and a table of this test's own, never the agent's `inet llmgw`.
 */

const TABLE = `llmgw_teardown_${process.pid}`;
const exists = () => {
  try {
    execFileSync('nft', ['list', 'table', 'inet', TABLE], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
};

afterEach(() => {
  if (exists()) execFileSync('nft', ['delete', 'table', 'inet', TABLE], { stdio: 'ignore' });
});

function runsDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-runs-'));
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A port nothing listens on: one a server had, closed. */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address() as AddressInfo;
  await new Promise((r) => s.close(r));
  return port;
}

async function listening(): Promise<number> {
  const s: Server = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  onTestFinished(() => new Promise<void>((r) => s.close(() => r())));
  return (s.address() as AddressInfo).port;
}

describe('the suite teardown of the agent nft table', () => {
  it('removes a table absent when the run began, with the guards a killed agent left in it', async () => {
    const dir = runsDir();
    const release = claimAgentNftTable({ table: TABLE, runsDir: dir });
    await new NftPortGuard({ table: TABLE }).guard(await closedPort(), [0]);
    expect(release()).toMatch(/made by this test run, removed \(1 guarded ports left in it\)$/);
    expect(exists()).toBe(false);
    // The last run's entry gone, its folder goes too: nothing of the suite's is left in /tmp.
    expect(existsSync(dir)).toBe(false);
  });

  it('leaves a table that was there before the run (look-alike: the same table, not made by it)', async () => {
    await new NftPortGuard({ table: TABLE }).guard(await closedPort(), [0]);
    const release = claimAgentNftTable({ table: TABLE, runsDir: runsDir() });
    expect(release()).toMatch(/was there before this test run: left alone$/);
    expect(exists()).toBe(true);
  });

  it('leaves a table whose guarded port is listened on: a live engine, not a leftover', async () => {
    const release = claimAgentNftTable({ table: TABLE, runsDir: runsDir() });
    const port = await listening();
    await new NftPortGuard({ table: TABLE }).guard(port, [0]);
    expect(release()).toBe(`nft table inet ${TABLE} left: ports ${port} it guards are listened on`);
    expect(exists()).toBe(true);
  });

  it('leaves the table to another test run still going; a run begun meanwhile inherits its word that the table was absent, and the last to end removes it', async () => {
    const dir = runsDir();
    // Another run, begun while the table was absent: a live process of its own.
    const other = spawn('sleep', ['600'], { stdio: 'ignore' });
    onTestFinished(() => {
      other.kill('SIGKILL');
    });
    const pid = other.pid as number;
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const start = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
    writeFileSync(join(dir, `${pid}.json`), JSON.stringify({ pid, start, tableAbsentAtStart: true }));
    // Its agents made the table; this run begins with it there.
    await new NftPortGuard({ table: TABLE }).guard(await closedPort(), [0]);
    expect(claimAgentNftTable({ table: TABLE, runsDir: dir })()).toBe(`nft table inet ${TABLE} left to the test runs still going`);
    expect(exists()).toBe(true);
    // The other run's entry is still in the folder: it stays.
    expect(existsSync(join(dir, `${pid}.json`))).toBe(true);
    const release = claimAgentNftTable({ table: TABLE, runsDir: dir });
    other.kill('SIGKILL');
    await new Promise((r) => other.once('exit', r));
    expect(release()).toMatch(/made by this test run, removed/);
    expect(exists()).toBe(false);
  });

  it('takes an entry whose pid now names another process for a dead run (look-alike: a reused pid)', async () => {
    const dir = runsDir();
    writeFileSync(join(dir, 'garbage.json'), 'not json');
    writeFileSync(join(dir, '1.json'), JSON.stringify({ pid: 1, start: 'not-its-start', tableAbsentAtStart: false }));
    const release = claimAgentNftTable({ table: TABLE, runsDir: dir });
    await new NftPortGuard({ table: TABLE }).guard(await closedPort(), [0]);
    expect(release()).toMatch(/removed/);
    expect(exists()).toBe(false);
  });
});
