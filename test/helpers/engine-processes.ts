import { type CheckedStartShard, parseStartShard } from '../../src/lib/shard-id.js';
import type { EngineWatch } from '../../src/lib/engine-watch.js';
import { create } from '@bufbuild/protobuf';
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { SupervisorConfig } from '../../src/agent/config/agent-config.js';
import type { LaunchPlan } from '../../src/agent/engines/launch-plan.js';
import { SimEngine } from '../../src/agent/engines/sim/sim-engine.js';
import { StartShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { readEphemeralPortRange } from '../../src/lib/ephemeral-port-range.js';
import { BIN } from './run-cli.js';

/**
 * Helpers for tests that start real engine processes. Every process a test
 * starts writes into its own temporary log directory, so cleanup can find
 * them all (grandchildren included) by what their stdout points at, even when
 * the test failed before it learned their pids.
 */

export function tempDirs(): { root: string; stateDir: string; logDir: string } {
  const root = mkdtempSync(join(tmpdir(), 'llmgw-sup-'));
  return { root, stateDir: join(root, 'state'), logDir: join(root, 'log') };
}

export function testConfig(dirs: { stateDir: string; logDir: string }, over: Partial<SupervisorConfig> = {}): SupervisorConfig {
  return {
    stateDir: dirs.stateDir,
    logDir: dirs.logDir,
    stopGraceMs: 2000,
    workerSettleMs: 300,
    healthIntervalMs: 200,
    stallTimeoutMs: 60_000,
    logMaxBytes: 64 * 1024 * 1024,
    launcher: 'direct',
    ...over,
  };
}

/** The sim engine as the registry's `sim` engine launches it. */
export function simPlan(args: string[]): LaunchPlan {
  return { argv: [process.execPath, BIN, 'sim', 'engine', ...args], env: { NO_COLOR: '1' } };
}

/** The sim's watch for an API rank on `port`, as its engine declares it: what the agent passes to a start. */
export function simWatch(port: number): EngineWatch {
  return new SimEngine(undefined, 'lo').watch(shardSpec('w', port), simPlan([]));
}

export function shardSpec(shardId: string, httpPort = 0, model = 'sim-model'): CheckedStartShard {
  return parseStartShard(
    create(StartShardSchema, {
      shardId,
      replicaId: `replica-of-${shardId}`,
      rank: 0,
      nnodes: 1,
      httpPort,
      profile: { name: 'sim-small', engine: 'sim', model, servedModelName: model },
    }),
  );
}

/**
 * A port that is free now and outside this node's ephemeral range: the agent
 * refuses an http_port inside it, and the kernel's own pick (port 0) is
 * always inside it.
 */
/** Ports this process handed out, never handed out again (a test's engine may still be coming up on one). */
const handedOut = new Set<number>();

export async function freePort(): Promise<number> {
  const range = (await readEphemeralPortRange()) ?? { low: 32768, high: 60999 };
  // 10000-17999: clear of the registered ports below, of the reference
  // control plane's pool (18000-18999) and of the 20000+ ranges the e2e
  // suites hand out; above the ephemeral range on a node where it starts low.
  const [low, high] = range.low > 11_000 ? [10_000, Math.min(17_999, range.low - 1)] : [range.high + 1, 65_535];
  // A slice per vitest worker: two test files running at once never draw the same port, where a
  // port free when one checked it was bound by the other before its engine started (seen: "port
  // 17686 held by another process" failing a systemd-run start).
  const workers = 4;
  const worker = (Number(process.env.VITEST_POOL_ID ?? '1') - 1) % workers;
  const size = Math.floor((high - low + 1) / workers);
  const first = low + worker * size;
  for (let tries = 0; ; tries++) {
    const port = first + Math.floor(Math.random() * size);
    // A port fetch refuses ("bad port", the Fetch standard's port blocking): 10080 is the one in this range.
    if (port === 10_080) continue;
    if (handedOut.has(port) && tries < size) continue;
    if (await canBind(port)) {
      handedOut.add(port);
      if (handedOut.size > size / 2) handedOut.clear();
      return port;
    }
  }
}

function canBind(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.on('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

interface ProcInfo {
  pid: number;
  pgid: number;
  state: string;
  startTime: string;
}

export function procInfo(pid: number): ProcInfo | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const rest = text.slice(text.lastIndexOf(')') + 2).split(' ');
    return { pid, state: rest[0] as string, pgid: Number(rest[2]), startTime: rest[19] as string };
  } catch {
    return undefined;
  }
}

/** Running (not zombie) — what "the process is gone" is judged by. */
export function isRunning(pid: number): boolean {
  const p = procInfo(pid);
  return p !== undefined && p.state !== 'Z' && p.state !== 'X';
}

export function groupMembers(pgid: number): number[] {
  return readdirSync('/proc')
    .filter((n) => /^\d+$/.test(n))
    .map(Number)
    .filter((pid) => {
      const p = procInfo(pid);
      return p !== undefined && p.pgid === pgid && p.state !== 'Z';
    });
}

/** Pids of running processes whose stdout or stderr is a file under `dir`. */
export function processesWritingUnder(dir: string): number[] {
  const pids: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    for (const fd of [1, 2]) {
      try {
        if (readlinkSync(`/proc/${name}/fd/${fd}`).startsWith(`${dir}/`)) {
          if (isRunning(Number(name))) pids.push(Number(name));
          break;
        }
      } catch {}
    }
  }
  return pids;
}

/** SIGKILLs the process groups of everything writing under `dir`, plus `extraGroups`, and waits until they are gone. */
export async function killEverything(dir: string, extraGroups: number[] = []): Promise<void> {
  const ownGroup = procInfo(process.pid)?.pgid;
  for (let attempt = 0; attempt < 50; attempt++) {
    const groups = new Set(extraGroups.filter((g) => g > 1 && isRunning(g) && g !== ownGroup));
    for (const pid of processesWritingUnder(dir)) {
      const pgid = procInfo(pid)?.pgid;
      if (pgid && pgid > 1 && pgid !== ownGroup) groups.add(pgid);
      else {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {}
      }
    }
    const live = [...groups].filter((g) => groupMembers(g).length > 0);
    if (live.length === 0 && processesWritingUnder(dir).length === 0) return;
    for (const g of live) {
      try {
        process.kill(-g, 'SIGKILL');
      } catch {}
    }
    await sleep(50);
  }
  throw new Error(`processes under ${dir} survived SIGKILL`);
}

export function removeDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

/** Polls `check` until it returns true; a safety net, not a speed assertion. */
export async function until(check: () => boolean | Promise<boolean>, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}
