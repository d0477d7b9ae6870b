/**
 * Figures 6 and 7: engine logs. 6: `ctl logs -n 100` on a 1 GiB log beside
 * a 1 KiB one. 7: an engine logging flat out through the supervisor's log
 * file (rotation on and off) beside /dev/null, a file in RAM and a plain file.
 */
import { spawnSync } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { Supervisor } from '../src/agent/supervisor/supervisor.js';
import { parseStartShard } from '../src/lib/shard-id.js';
import { BIN } from '../test/helpers/run-cli.js';
import { isRegister } from '../test/helpers/sim-shards.js';
import { controlPlane, median, newRoot, sleep, spawnAgent, startShards } from './bench-support.js';
import { ms, timeSideBySide } from './command-timing.js';
import type { BenchRow } from './fleet-figure.js';

export async function ctlLogsFigure(rows: BenchRow[], quick: boolean): Promise<void> {
  const { cp, url } = await controlPlane();
  const dirs = newRoot('f6');
  spawnAgent(url, dirs, { extraYaml: '' });
  await cp.waitFor('node-a', isRegister, 30_000);
  // Two shards; one log is grown to 1 GiB with lines appended as an engine would.
  await startShards(cp, 'node-a', 2);
  const big = join(dirs.logDir, 'shards', 's0.log');
  const fd = openSync(big, 'a');
  const line = `${'x'.repeat(119)}\n`;
  const chunk = Buffer.from(line.repeat(8192));
  for (let written = 0; written < 1024 ** 3; written += chunk.length) writeSync(fd, chunk);
  closeSync(fd);
  const node = process.execPath;
  const [bigMs, smallMs] = timeSideBySide(
    [
      [node, BIN, 'ctl', 'logs', 's0', '-n', '100', '--socket', dirs.socket],
      [node, BIN, 'ctl', 'logs', 's1', '-n', '100', '--socket', dirs.socket],
    ],
    quick ? 5 : 11,
  ) as [number, number];
  rows.push({ figure: '6 `ctl logs -n 100` on a 1 GiB log', measured: `${ms(bigMs)} (${(bigMs / smallMs).toFixed(2)}x)`, reference: `1 KiB log: ${ms(smallMs)}`, target: '<= 1.5x', met: bigMs / smallMs <= 1.5 });
}

export async function logThroughputFigure(rows: BenchRow[], notes: string[], quick: boolean): Promise<void> {
  const dirs = newRoot('f7');
  const seconds = 3;
  const runs = quick ? 2 : 7;
  // The engine: a writer that prints 100-byte lines flat out for `seconds`,
  // then records how many it wrote.
  const writer = (out: string) =>
    `const line='${'y'.repeat(99)}\\n';let n=0;const end=Date.now()+${seconds * 1000};while(Date.now()<end){for(let i=0;i<1000;i++)process.stdout.write(line);n+=1000}require('fs').writeFileSync(${JSON.stringify(out)},String(n))`;
  const direct = (stdout: number, out: string): number => {
    const r = spawnSync(process.execPath, ['-e', writer(out)], { stdio: ['ignore', stdout, 'inherit'] });
    closeSync(stdout);
    if (r.status !== 0) throw new Error('writer failed');
    return Number(readFileSync(out, 'utf8'));
  };
  const { create: createMsg } = await import('@bufbuild/protobuf');
  const { StartShardSchema } = await import('../src/gen/llmgw/v1/agent_pb.js');
  /** The writer as a shard of a Supervisor of its own, which rotates its log at `logMaxBytes`. */
  const supervisedBy = (name: string, logMaxBytes: number) => {
    const logDir = join(dirs.root, name);
    const sup = new Supervisor({
      config: { stateDir: join(dirs.root, `${name}-state`), logDir, stopGraceMs: 2000, workerSettleMs: 100, healthIntervalMs: 10_000, stallTimeoutMs: 0, logMaxBytes, launcher: 'direct' },
    });
    const run = async (i: number): Promise<number> => {
      const out = join(dirs.root, `${name}-${i}`);
      const spec = createMsg(StartShardSchema, { shardId: `writer-${i}`, replicaId: 'r', profile: { engine: 'sim' } });
      await sup.start(parseStartShard(spec), { plan: { argv: [process.execPath, '-e', writer(out)], env: {} }, servesHttp: false });
      for (let t = 0; t < 200 && !existsSync(out); t++) await sleep(50);
      await sleep(200); // the count is written just before exit
      return Number(readFileSync(out, 'utf8'));
    };
    return { run, logDir, close: () => sup.close() };
  };
  const rotating = supervisedBy('rotating', 64 * 1024 ** 2);
  const unrotated = supervisedBy('unrotated', 2 ** 50);
  // A file in RAM (tmpfs), where there is no disk or journal: what any file costs over /dev/null.
  const ramLog = existsSync('/dev/shm') ? join('/dev/shm', `llmgw-bench-${process.pid}.log`) : join(dirs.root, 'ram.log');
  const kinds = {
    devNull: (i: number) => direct(openSync('/dev/null', 'w'), join(dirs.root, `null-${i}`)),
    ramFile: (i: number) => direct(openSync(ramLog, 'a'), join(dirs.root, `ram-${i}`)),
    plainFile: (i: number) => direct(openSync(join(dirs.root, 'plain.log'), 'a'), join(dirs.root, `plain-${i}`)),
    unrotated: unrotated.run,
    rotating: rotating.run,
  };
  const lines: Record<keyof typeof kinds, number[]> = { devNull: [], ramFile: [], plainFile: [], unrotated: [], rotating: [] };
  const order = Object.keys(kinds) as (keyof typeof kinds)[];
  // Interleaved run by run, so that load on this shared machine falls on all
  // alike; in a rotating order, each after a `sync` with the logs of the run
  // before removed: a run that follows a file run otherwise pays for the
  // writeback of its dirty pages (it once made the supervisor look 12 % slower).
  for (let i = 0; i < runs; i++) {
    for (let k = 0; k < order.length; k++) {
      for (const file of [join(dirs.root, 'plain.log'), ramLog]) rmSync(file, { force: true });
      for (const dir of [rotating.logDir, unrotated.logDir]) rmSync(join(dir, 'shards'), { recursive: true, force: true });
      spawnSync('sync');
      const kind = order[(i + k) % order.length] as keyof typeof kinds;
      lines[kind].push(await kinds[kind](i));
    }
  }
  rotating.close();
  unrotated.close();
  rmSync(ramLog, { force: true });
  const ref = median(lines.devNull);
  const rate = (n: number) => `${(n / seconds / 1e6).toFixed(2)} M lines/s`;
  const vsRef = (xs: number[]) => `${rate(median(xs))} (${(median(xs) / ref).toFixed(2)}x)`;
  const ratio = median(lines.rotating) / ref;
  rows.push({ figure: '7 engine logging flat out through the log file (rotation on)', measured: vsRef(lines.rotating), reference: `/dev/null: ${rate(ref)}`, target: '>= 0.9x', met: ratio >= 0.9 });
  notes.push(
    `7 medians of ${runs} interleaved runs of ${seconds} s, beside /dev/null: the same writer appending to a file in RAM (tmpfs), no supervisor, ${vsRef(lines.ramFile)}; to a plain file on the log's disk, ${vsRef(lines.plainFile)}; through the supervisor with rotation off, ${vsRef(lines.unrotated)}; with rotation at 64 MiB, ${vsRef(lines.rotating)}`,
  );
}
