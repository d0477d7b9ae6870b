import { appendFileSync } from 'node:fs';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { create } from '@bufbuild/protobuf';
import { ShardState, SleepShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { freePort, until } from '../helpers/engine-processes.js';
import { kmsgAgent, xid79Line } from '../helpers/kmsg-agent.js';
import { BIN, runCli } from '../helpers/run-cli.js';
import { shardIs, simStart } from '../helpers/sim-shards.js';

/*
 * `llmgw ctl events` against a real agent: the ring the agent keeps, read
 * once (--json, --since) and followed (-f), where an event must be pushed
 * as it happens, not found by a poll.
 */

/** `ctl events -f` running, each stdout line with the moment it arrived. */
function follow(socket: string) {
  const child = execa(process.execPath, [BIN, 'ctl', 'events', '-f', '--socket', socket], { reject: false, stdin: 'ignore', buffer: false, env: { NO_COLOR: '1' } });
  const lines: { text: string; atMs: number }[] = [];
  let partial = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    const atMs = Date.now();
    partial += chunk.toString();
    const parts = partial.split('\n');
    partial = parts.pop() ?? '';
    for (const text of parts) lines.push({ text, atMs });
  });
  const exited = child.then((r) => r);
  onTestFinished(async () => {
    child.kill('SIGKILL');
    await exited;
  });
  return { child, exited, lines };
}

/*
 * One agent for the tests that need one, each with a shard and a GPU of its
 * own (s1 on GPU 0 and the fault on GPU 2, s2 on GPU 1, s3 on GPU 5): each
 * looks for its own shard's events and its own kinds (the first for the
 * connection's, which the backlog holds whatever came after them; the last
 * for the node's, which only its cordons make), so they share the agent's
 * start (an agent and a control plane, some 2 s on this machine) and not
 * their findings. The first test runs first, while s1 is the only shard.
 */
describe('llmgw ctl events', () => {
  const ends: Array<() => unknown> = [];
  let a: Awaited<ReturnType<typeof kmsgAgent>>;
  beforeAll(async () => {
    a = await kmsgAgent('llmgw-events-', (fn) => ends.push(fn));
  }, 60_000);
  afterAll(async () => {
    for (const fn of ends.reverse()) await fn();
  }, 60_000);

  it('follows the agent: a shard transition prints as it is logged, then a GPU fault; Ctrl-C ends it with exit 0', async () => {
    const f = follow(a.socket);
    // The backlog: the stream's phases since the agent started.
    await until(() => f.lines.some((l) => /connection .*connecting → connected/.test(l.text)), 'the connection events of the backlog');

    const ready = a.cp.waitFor('node-a', shardIs('s1', ShardState.READY), 30_000);
    a.cp.send('node-a', { case: 'start', value: simStart('s1', await freePort()) });
    await ready;
    await until(() => f.lines.some((l) => /s1 .*STARTING → READY/.test(l.text)), 'the READY transition printed');
    const printed = f.lines.find((l) => /s1 .*STARTING → READY/.test(l.text));
    // The log line comes through the agent's stderr, the event through its socket and ctl: either may arrive first.
    const isReadyLine = (r: (typeof a.records)[number]) => r.msg === 'shard state changed' && r.shard === 's1' && r.to === 'READY';
    await until(() => a.records.some(isReadyLine), "the agent's log line of s1 READY");
    const logged = a.records.find(isReadyLine);
    expect(printed?.text).toMatch(/^\S+Z {2}shard +s1 +STARTING → READY: /);
    expect(logged).toBeDefined();
    const latencyMs = (printed?.atMs ?? 0) - Date.parse(String(logged?.time));
    // How soon is a measurement, printed and not asserted (the brief: no wall-clock limits in tests; `until`'s
    // timeout is the safety net). That it comes at all without a poll is what the test proves: nothing in
    // ctl-events.ts polls, and the agent's own state changes are pushed down the stream.
    console.info(`ctl events -f printed STARTING → READY ${latencyMs} ms after the agent's log line (its time, ms resolution)`);

    const injectedAt = Date.now();
    appendFileSync(a.kmsg, xid79Line());
    const isFault = (text: string) => /gpu +gpu 2 +GPU 2: Xid 79: GPU has fallen off the bus/.test(text);
    await until(() => f.lines.some((l) => isFault(l.text)), 'the GPU fault printed');
    await until(() => a.records.some((r) => r.msg === 'GPU fault' && r.gpu === 2), "the agent's log line of the GPU fault");
    const faultLogged = a.records.find((r) => r.msg === 'GPU fault' && r.gpu === 2);
    const faultPrinted = f.lines.find((l) => isFault(l.text));
    console.info(
      `GPU fault: logged ${Date.parse(String(faultLogged?.time)) - injectedAt} ms after the kernel-log line was written, printed by ctl events -f ${(faultPrinted?.atMs ?? 0) - Date.parse(String(faultLogged?.time))} ms after that`,
    );
    // The shard on another GPU is untouched; nothing else printed a transition of it.
    expect(f.lines.filter((l) => /s1 /.test(l.text)).length).toBe(2);

    f.child.kill('SIGINT');
    expect((await f.exited).exitCode).toBe(0);
  }, 120_000);

  it('prints one AgentEvent per line with --json, and --since keeps only what happened from then on', async () => {
    // Registered is not yet connected: the control plane's first answer makes the stream "connected".
    await until(() => a.records.some((r) => r.msg === 'control-plane connection' && r.to === 'connected'), 'the stream connected');
    const ready = a.cp.waitFor('node-a', shardIs('s2', ShardState.READY), 30_000);
    a.cp.send('node-a', { case: 'start', value: simStart('s2', await freePort(), { gpu: 1 }) });
    await ready;

    const all = await runCli(['ctl', 'events', '--json', '--socket', a.socket]);
    expect(all.exitCode).toBe(0);
    const events = all.stdout.trim().split('\n').map((l) => JSON.parse(l));
    const seqs = events.map((e) => Number(e.seq));
    expect(seqs).toEqual(seqs.map((_, i) => (seqs[0] as number) + i));
    expect(events.find((e) => e.kind === 'connection' && e.fields.to === 'connected')).toBeDefined();
    expect(events.find((e) => e.kind === 'shard' && e.shardId === 's2' && e.fields.to === 'READY')).toMatchObject({
      fields: { from: 'STARTING', to: 'READY', replica: 'r-s2' },
      message: expect.stringMatching(/^STARTING → READY: /),
      at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
    });

    // From just after the connection's own event, by the agent's clock: a time
    // taken here once fell before the event was recorded (it is recorded after
    // its log line), or in the same millisecond, and --since rightly kept it.
    const connected = events.find((e) => e.kind === 'connection' && e.fields.to === 'connected');
    const before = new Date(Date.parse(connected.at) + 1).toISOString();
    // Three reads that change nothing, run together.
    const [since, recent, bad] = await Promise.all([
      runCli(['ctl', 'events', '--json', '--since', before, '--socket', a.socket]),
      runCli(['ctl', 'events', '--since', '10m', '--socket', a.socket]),
      runCli(['ctl', 'events', '--since', 'yesterday', '--socket', a.socket]),
    ]);
    expect(since.exitCode).toBe(0);
    const kept = since.stdout.trim().split('\n').map((l) => JSON.parse(l));
    expect(kept.map((e) => e.kind)).toContain('shard');
    // The stream connected before then; a reconnect after it (a loaded machine) would rightly be kept.
    expect(kept.map((e) => e.seq)).not.toContain(connected.seq);
    expect(kept.every((e) => Date.parse(e.at) >= Date.parse(before))).toBe(true);

    expect(recent.stdout).toMatch(/connection .*connecting → connected/);
    expect(recent.stdout).toMatch(/s2 +STARTING → READY/);

    expect(bad.exitCode).toBe(2);
    expect(bad.stderr).toMatch(/--since "yesterday" is neither a duration nor an RFC 3339 time/);
  }, 120_000);

  it('lists what happens to the node itself: a cordon and an uncordon with who and why, and a refused sleep (walkthrough 3, item 7)', async () => {
    expect((await runCli(['ctl', 'cordon', '--reason', 'swap PSU, OPS-7', '--socket', a.socket])).exitCode).toBe(0);
    // A second operator's cordon replaces the reason, and says so (walkthrough 3: it was silent).
    const again = await runCli(['ctl', 'cordon', '--reason', 'firmware, OPS-8', '--socket', a.socket]);
    expect(again.stdout).toMatch(/^node's cordon reason replaced \(was: swap PSU, OPS-7\) since .* \(firmware, OPS-8\)/);
    expect((await runCli(['ctl', 'uncordon', '--socket', a.socket])).exitCode).toBe(0);
    const ready = a.cp.waitFor('node-a', shardIs('s3', ShardState.READY), 30_000);
    a.cp.send('node-a', { case: 'start', value: simStart('s3', await freePort(), { gpu: 5 }) });
    await ready;
    // The sim shard has no sleep mode: refused, and the refusal is an event as a refused start is.
    const refused = a.cp.waitFor('node-a', (m) => m.msg.case === 'shard' && m.msg.value.shardId === 's3' && m.msg.value.error.startsWith('sleep refused'), 30_000);
    a.cp.send('node-a', { case: 'sleep', value: create(SleepShardSchema, { shardId: 's3', level: 1 }) });
    await refused;
    const uid = String(process.geteuid?.() ?? 0);
    let events: { kind: string; message: string; fields: Record<string, string> }[] = [];
    await until(async () => {
      const r = await runCli(['ctl', 'events', '--json', '--socket', a.socket]);
      events = r.stdout.trim().split('\n').map((l) => JSON.parse(l));
      return events.some((e) => e.kind === 'refusal' && e.fields.refused === 'sleep');
    }, 'the refused sleep among the events');
    const node = events.filter((e) => e.kind === 'node');
    expect(node.map((e) => e.message)).toEqual([`cordoned by uid ${uid}: swap PSU, OPS-7`, `cordoned by uid ${uid}: firmware, OPS-8`, `uncordoned by uid ${uid}`]);
    expect(node[0]?.fields).toMatchObject({ condition: 'Cordoned', active: 'true', uid, reason: 'swap PSU, OPS-7' });
  }, 120_000);

  it('says the agent is not running, exit 69, when nothing listens on the socket', async () => {
    const r = await runCli(['ctl', 'events', '--socket', '/nonexistent/llmgw.sock']);
    expect(r.exitCode).toBe(69);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
  });
});
