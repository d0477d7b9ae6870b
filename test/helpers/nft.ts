import { execFileSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, rmSync, rmdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureDebianPackage } from './debian-package.js';

/*
 * nft (Debian's `nftables`), which the agent runs to guard a sleep-mode
 * shard's port (src/agent/supervisor/shard/sleep-port-guards.ts): every vLLM or SGLang double
 * started with sleep_mode in this suite needs it, so the suite's global
 * set-up installs it where it is missing (ensureDebianPackage).
 *
 * Those agents make the nftables table `inet llmgw` (src/lib/net/
 * nft-port-guard.ts), which outlives them by design: its rule and sets
 * survive an agent restart with the engines they guard. The suite removes
 * it at the end only when it made it: the table was absent when the first
 * of the test runs now on this machine began (several run side by side on a
 * shared machine: a run that ends removes nothing while another still runs),
 * and no port it guards is listened on (a live engine's guard, which no
 * finished test run has).
 */

/** The agent's table (NftPortGuard's default). */
export const AGENT_NFT_TABLE = 'llmgw';
/** One file per test run on this machine, named by its pid: whether the table was absent when the first of them began. */
export const TEST_RUNS_DIR = join(tmpdir(), 'llmgw-test-runs');

/** Returns once `nft` is on PATH, installing `nftables` with apt-get when missing; throws a one-line fix when it cannot. */
export function ensureNft(): Promise<void> {
  return ensureDebianPackage('nftables', 'nft');
}

/** The ports of the agent's table's guarded_ports set; undefined when the table (or nft) is absent. */
function guardedPorts(table: string): number[] | undefined {
  let text: string;
  try {
    text = execFileSync('nft', ['-j', '-n', 'list', 'table', 'inet', table], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], timeout: 10_000 });
  } catch {
    return undefined;
  }
  const doc = JSON.parse(text) as { nftables?: Array<{ set?: { name?: string; elem?: unknown[] } }> };
  const elems = doc.nftables?.find((x) => x.set?.name === 'guarded_ports')?.set?.elem ?? [];
  return elems.filter((p): p is number => typeof p === 'number');
}

/** A process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat): a pid and this name one process, not a later one given its pid. */
function startTicks(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

interface RunEntry {
  pid: number;
  start: string;
  tableAbsentAtStart: boolean;
}

/** The other test runs still running, their dead entries removed. */
function otherRuns(runsDir: string): RunEntry[] {
  const live: RunEntry[] = [];
  let names: string[] = [];
  try {
    names = readdirSync(runsDir);
  } catch {
    return live;
  }
  for (const name of names) {
    if (name === `${process.pid}.json`) continue;
    const path = join(runsDir, name);
    try {
      const e = JSON.parse(readFileSync(path, 'utf8')) as RunEntry;
      if (startTicks(e.pid) === e.start) live.push(e);
      else rmSync(path, { force: true });
    } catch {
      rmSync(path, { force: true });
    }
  }
  return live;
}

/** TCP ports something listens on here (ss), or undefined when ss cannot say. */
function listeningPorts(): Set<number> | undefined {
  try {
    const out = execFileSync('ss', ['-Hltn'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], timeout: 10_000 });
    // State, Recv-Q, Send-Q, Local Address:Port, Peer Address:Port.
    const locals = out.split('\n').flatMap((l) => l.trim().split(/\s+/)[3] ?? []);
    return new Set(locals.map((a) => Number(a.slice(a.lastIndexOf(':') + 1))));
  } catch {
    return undefined;
  }
}

/**
 * Called in the suite's global set-up: notes whether the agent's table is
 * there before this run (or before the runs already going on this machine).
 * The function it returns, called at the suite's end, removes the table
 * when this suite made it and nothing is left to guard; it returns what it
 * did, in one line, for the log.
 */
export function claimAgentNftTable({ table = AGENT_NFT_TABLE, runsDir = TEST_RUNS_DIR } = {}): () => string {
  const others = otherRuns(runsDir);
  const absent = others.length > 0 ? others.some((e) => e.tableAbsentAtStart) : guardedPorts(table) === undefined;
  const entry = join(runsDir, `${process.pid}.json`);
  const register = () => {
    mkdirSync(runsDir, { recursive: true });
    writeFileSync(entry, JSON.stringify({ pid: process.pid, start: startTicks(process.pid) ?? '', tableAbsentAtStart: absent } satisfies RunEntry));
  };
  try {
    register();
  } catch (err) {
    // The folder removed by a run that ended between its mkdir and this write (below): made again.
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    register();
  }
  return () => {
    rmSync(entry, { force: true });
    // The folder goes with the last run's entry (rmdir refuses while another run's is in it): nothing left in /tmp.
    try {
      rmdirSync(runsDir);
    } catch {
      // Another run's entry is there.
    }
    if (!absent) return `nft table inet ${table} was there before this test run: left alone`;
    if (otherRuns(runsDir).length > 0) return `nft table inet ${table} left to the test runs still going`;
    const ports = guardedPorts(table);
    if (ports === undefined) return `nft table inet ${table}: none`;
    const listening = listeningPorts();
    const live = listening === undefined ? ports : ports.filter((p) => listening.has(p));
    if (live.length > 0) return `nft table inet ${table} left: ports ${live.join(', ')} it guards are listened on`;
    execFileSync('nft', ['delete', 'table', 'inet', table], { stdio: 'ignore', timeout: 10_000 });
    return `nft table inet ${table}, made by this test run, removed (${ports.length} guarded ports left in it)`;
  };
}
