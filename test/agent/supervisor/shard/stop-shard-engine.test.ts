import { type ChildProcess, spawn } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { EngineProcess } from '../../../../src/agent/supervisor/launch/engine-process.js';
import { stopShardEngine } from '../../../../src/agent/supervisor/shard/stop-shard-engine.js';
import { captureLogger } from '../../../helpers/capture-logger.js';
import { isRunning, until } from '../../../helpers/engine-processes.js';
import { readProcessIdentity } from '../../../helpers/read-process-identity.js';

/* Ending a shard's engine and saying how it ended: real process groups, real signals. */

const started: number[] = [];
afterEach(() => {
  for (const pid of started.splice(0)) {
    try {
      process.kill(-pid, 'SIGKILL');
    } catch {}
  }
});

/** A leader of its own process group; `ignoreTerm` makes it outlive SIGTERM. */
async function engine(ignoreTerm = false): Promise<ChildProcess> {
  const code = `${ignoreTerm ? "process.on('SIGTERM', () => {});" : ''} setInterval(() => {}, 1 << 30); console.log('up');`;
  const child = spawn(process.execPath, ['-e', code], { detached: true, stdio: ['ignore', 'pipe', 'ignore'] });
  started.push(child.pid as number);
  // Its handler set before it is asked to end: a SIGTERM before then would end it anyway.
  await new Promise<void>((r) => child.stdout?.once('data', () => r()));
  return child;
}

function ours(child: ChildProcess, adopted = false): EngineProcess {
  const pid = child.pid as number;
  const identity = readProcessIdentity(pid);
  if (!identity) throw new Error(`process ${pid} is gone`);
  return new EngineProcess({ pid, pgid: pid, identity, ...(adopted ? {} : { child }) }, undefined);
}

describe('stopShardEngine', () => {
  it('ends its own child with SIGTERM and reports the exit Node reaped', async () => {
    const child = await engine();
    const { logger } = captureLogger();
    const got = await stopShardEngine(ours(child), { graceMs: 10_000, log: logger, deathSeen: () => false });
    expect(got).toEqual({ why: 'process group terminated', exit: { code: null, signal: 'SIGTERM' } });
  });

  it('kills one that outlives SIGTERM after the grace, and says so', async () => {
    const child = await engine(true);
    const { logger } = captureLogger();
    const got = await stopShardEngine(ours(child), { graceMs: 200, log: logger, deathSeen: () => false });
    expect(got).toEqual({ why: 'process group killed', exit: { code: null, signal: 'SIGKILL' } });
  });

  it('reports no exit of its own when the death watch saw it first', async () => {
    const child = await engine();
    const { logger } = captureLogger();
    expect(await stopShardEngine(ours(child), { graceMs: 10_000, log: logger, deathSeen: () => true })).toEqual({ why: 'process group terminated' });
  });

  it('knows no exit status of an adopted engine, which is not its child', async () => {
    const child = await engine();
    const { logger } = captureLogger();
    const got = await stopShardEngine(ours(child, true), { graceMs: 10_000, log: logger, deathSeen: () => false });
    expect(got).toEqual({ why: 'process group terminated', exit: undefined });
  });

  it('signals nothing, and warns, when the recorded pid now names another process', async () => {
    const child = await engine();
    const pid = child.pid as number;
    const identity = readProcessIdentity(pid);
    if (!identity) throw new Error('gone');
    const stranger = new EngineProcess({ pid, pgid: pid, identity: { ...identity, startTime: '1' } }, undefined);
    const { logger, records } = captureLogger();
    const got = await stopShardEngine(stranger, { graceMs: 200, log: logger, deathSeen: () => false });
    expect(got.why).toBe('process group not-ours');
    expect(records.map((r) => r.msg)).toContain('engine pid now names another process; nothing was signalled');
    expect(isRunning(pid)).toBe(true);
    process.kill(-pid, 'SIGKILL');
    await until(() => !isRunning(pid) || child.exitCode !== null || child.signalCode !== null, 'the stranger to end');
  });
});
