import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { listProcessGroup } from '../../../src/lib/process/process-table.js';
import { terminateProcessGroup } from '../../../src/lib/process/terminate-process-group.js';

/*
 * Real process groups: a leader (an engine's main process) and a worker in
 * its group. Each appends what it hears, in order, to one file, so a test
 * reads who got SIGTERM from whom.
 */

const log = "const fs=require('fs');const say=(m)=>fs.appendFileSync(process.env.OUT,m+'\\n');";

/** A worker: says it is ready once its handler is set; on SIGTERM says so and exits, unless STUBBORN. */
const WORKER = `${log}process.on('SIGTERM',()=>{say('worker got SIGTERM');if(!process.env.STUBBORN)process.exit(0)});say('worker ready');setInterval(()=>{},1e9)`;

/**
 * A leader as vLLM's API server is: on SIGTERM it finishes its in-flight work
 * (300 ms) and only then SIGTERMs its worker, exiting once the worker is gone.
 * LEADER_EXITS: it exits at once after starting the worker, leaving it behind.
 */
const LEADER = `${log}const {spawn}=require('child_process');
const w=spawn(process.execPath,['-e',${JSON.stringify(WORKER)}],{stdio:'ignore'});
if(process.env.IGNORE)process.on('SIGTERM',()=>say('leader ignored SIGTERM'));
else process.on('SIGTERM',()=>{say('leader got SIGTERM');setTimeout(()=>{say('leader done, asks its worker');w.kill('SIGTERM');if(w.exitCode!==null||w.signalCode!==null)process.exit(0);w.on('exit',()=>process.exit(0))},300)});
if(process.env.LEADER_EXITS)setTimeout(()=>process.exit(0),200);
setInterval(()=>{},1e9)`;

let dir = '';
/** Every directory a test made: one test may start several engines, each with its own. */
const dirs: string[] = [];
const started: ChildProcess[] = [];

afterEach(() => {
  for (const c of started.splice(0)) {
    try {
      if (c.pid) process.kill(-c.pid, 'SIGKILL');
    } catch {
      // Already gone.
    }
  }
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const heard = () => (existsSync(join(dir, 'out')) ? readFileSync(join(dir, 'out'), 'utf8').trim().split('\n') : []);

async function until(pred: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if (pred()) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`${what}: not within 5 s`);
}

/** Starts a leader in a group of its own and waits until its worker's SIGTERM handler is set. */
async function startEngine(env: Record<string, string> = {}): Promise<number> {
  dir = mkdtempSync(join(tmpdir(), 'llmgw-tpg-'));
  dirs.push(dir);
  const c = spawn(process.execPath, ['-e', LEADER], { detached: true, stdio: 'ignore', env: { ...process.env, OUT: join(dir, 'out'), ...env } });
  started.push(c);
  await until(() => heard().includes('worker ready'), 'the worker to be ready');
  if (env.LEADER_EXITS) await until(() => listProcessGroup(c.pid as number).length === 1, 'the leader to exit, leaving its worker');
  return c.pid as number;
}

describe('terminateProcessGroup', () => {
  it("with sigtermTo 'leader', the leader alone gets SIGTERM: its worker hears it only from the leader, after the leader's work is done, and the group is 'terminated'", async () => {
    const pgid = await startEngine();
    const outcome = await terminateProcessGroup({ pgid, stillOurs: () => true, graceMs: 5000, sigtermTo: 'leader' });
    expect(outcome).toBe('terminated');
    expect(heard()).toEqual(['worker ready', 'leader got SIGTERM', 'leader done, asks its worker', 'worker got SIGTERM']);
    expect(listProcessGroup(pgid)).toEqual([]);
  });

  it("with sigtermTo 'leader', a leader that ignores SIGTERM has its whole group SIGKILLed after graceMs, its worker included, which never got a SIGTERM", async () => {
    const pgid = await startEngine({ IGNORE: '1' });
    const t0 = Date.now();
    const outcome = await terminateProcessGroup({ pgid, stillOurs: () => true, graceMs: 500, sigtermTo: 'leader' });
    expect(outcome).toBe('killed');
    expect(Date.now() - t0).toBeGreaterThanOrEqual(500);
    expect(heard()).toEqual(['worker ready', 'leader ignored SIGTERM']);
    expect(listProcessGroup(pgid)).toEqual([]);
  });

  it("with sigtermTo 'leader' and the leader already gone, there is no main process to ask: its leftovers get SIGTERM as a group, and SIGKILL after graceMs when they ignore it", async () => {
    const pgid = await startEngine({ LEADER_EXITS: '1' });
    expect(await terminateProcessGroup({ pgid, stillOurs: () => true, graceMs: 5000, sigtermTo: 'leader' })).toBe('terminated');
    expect(heard()).toEqual(['worker ready', 'worker got SIGTERM']);

    const stubborn = await startEngine({ LEADER_EXITS: '1', STUBBORN: '1' });
    expect(await terminateProcessGroup({ pgid: stubborn, stillOurs: () => true, graceMs: 300, sigtermTo: 'leader' })).toBe('killed');
    expect(heard()).toEqual(['worker ready', 'worker got SIGTERM']);
    expect(listProcessGroup(stubborn)).toEqual([]);
  });

  it('by default (an orphan nobody can ask in order) SIGTERMs the whole group at once: the worker hears it before its leader is done', async () => {
    const pgid = await startEngine();
    expect(await terminateProcessGroup({ pgid, stillOurs: () => true, graceMs: 5000 })).toBe('terminated');
    expect(heard()).toEqual(['worker ready', expect.stringMatching(/got SIGTERM$/), expect.stringMatching(/got SIGTERM$/), 'leader done, asks its worker']);
  });

  it("asks stillOurs before every signal: 'not-ours' and nothing sent when the group is no longer ours, before the SIGTERM or before the SIGKILL", async () => {
    const pgid = await startEngine({ IGNORE: '1' });
    expect(await terminateProcessGroup({ pgid, stillOurs: () => false, graceMs: 100, sigtermTo: 'leader' })).toBe('not-ours');
    await new Promise((r) => setTimeout(r, 200));
    expect(heard()).toEqual(['worker ready']);

    let asked = 0;
    expect(await terminateProcessGroup({ pgid, stillOurs: () => ++asked === 1, graceMs: 200, sigtermTo: 'leader' })).toBe('not-ours');
    expect(asked).toBe(2);
    expect(heard()).toEqual(['worker ready', 'leader ignored SIGTERM']);
    // Refused before the SIGKILL: both still run.
    expect(listProcessGroup(pgid)).toHaveLength(2);
  });
});
