import { create } from '@bufbuild/protobuf';
import { timestampFromMs } from '@bufbuild/protobuf/wkt';
import { describe, expect, it } from 'vitest';
import { AgentEventSchema, ConnectionState, StatusResponseSchema } from '../../../src/gen/llmgw/v1/admin_pb.js';
import { ShardState } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { formatInFlight, formatRate, renderTop } from '../../../src/ctl/top/render-top.js';
import { bar, sparkline } from '../../../src/ctl/top/sparkline.js';
import { TopModel } from '../../../src/ctl/top/top-model.js';

const NOW = Date.parse('2026-12-02T03:00:00Z');

function model(): TopModel {
  const m = new TopModel();
  const status = create(StatusResponseSchema, {
    nodeId: 'node-a',
    version: '0.1.0',
    startedAt: timestampFromMs(NOW - 90_000),
    connection: { state: ConnectionState.CONNECTED, server: 'https://cp:443', connectedSince: timestampFromMs(NOW - 60_000) },
    inventory: { gpus: [{ index: 0, memoryTotalMb: 80_000 }, { index: 1, memoryTotalMb: 80_000 }] },
    gpus: [
      { index: 0, memoryUsedMb: 40_000, healthy: true },
      { index: 1, memoryUsedMb: 10, healthy: false, fault: 'Xid 79: GPU has fallen off the bus' },
    ],
    shards: [
      { shardId: 'b-ready', model: 'llama', engine: 'vllm', state: ShardState.READY, gpuIndices: [0], startedAt: timestampFromMs(NOW - 30_000), inFlight: 4, tokensPerSecond: 412.4 },
      { shardId: 'a-sick', model: 'qwen', engine: 'sglang', state: ShardState.UNHEALTHY, gpuIndices: [1], startedAt: timestampFromMs(NOW - 5_000), inFlight: -1, tokensPerSecond: -1 },
    ],
  });
  m.applyStatus(status, NOW);
  m.applyEvent(create(AgentEventSchema, { seq: 1n, at: timestampFromMs(NOW - 1000), kind: 'gpu', gpu: 1, message: 'GPU 1: Xid 79', fields: { event: 'XID' } }));
  return m;
}

describe('renderTop', () => {
  it('lists shards by state (the sick first), each with its age, memory bar and health, the GPUs with their faults, and the events', () => {
    const lines = renderTop(model(), { sort: 'state', filter: '', width: 160, height: 0, nowMs: NOW });
    const text = lines.join('\n');
    expect(text).toMatch(/^llmgw top {2}node node-a {2}agent 0\.1\.0 up 1m30s {2}stream CONNECTED to https:\/\/cp:443 for 1m00s/);
    const rows = lines.filter((l) => /^(a-sick|b-ready) /.test(l));
    expect(rows[0]).toMatch(/^a-sick +UNHEALTHY +5s +- +- +.* GPU 1 fault: Xid 79/);
    expect(rows[1]).toMatch(/^b-ready +READY +30s +4 +412 +.*█{10}░{10} 39\/78G +ok$/);
    expect(text).toMatch(/^SHARD +STATE +AGE +IN-FL +TOK\/S +TOK\/S 60s +GPUS/m);
    expect(text).toMatch(/^1 +░+ 10\/80000 MiB +FAULT +1 +Xid 79: GPU has fallen off the bus$/m);
    expect(text).toMatch(/gpu +gpu 1 +GPU 1: Xid 79/);
    expect(lines.every((l) => [...l].length <= 160)).toBe(true);
  });

  it('keeps only the shards the filter names, and on a screen puts the keys on its last row', () => {
    const lines = renderTop(model(), { sort: 'shard', filter: 'LLAMA', width: 100, height: 30, nowMs: NOW });
    expect(lines).toHaveLength(30);
    expect(lines.join('\n')).toContain('SHARDS 1/2 (sort: shard, filter "LLAMA")');
    expect(lines.some((l) => l.startsWith('a-sick'))).toBe(false);
    expect(lines[29]).toBe('q quit  s sort  / filter');
  });
});

describe('the tokens/s sparkline', () => {
  it('is built from successive Status answers, newest on the right, with a gap where the agent did not know', () => {
    const m = model();
    const again = (tps: number) => {
      const s = m.status;
      if (!s) throw new Error('no status');
      const next = create(StatusResponseSchema, { ...s, shards: s.shards.map((sh) => (sh.shardId === 'b-ready' ? { ...sh, tokensPerSecond: tps } : sh)) });
      m.applyStatus(next, NOW);
    };
    again(-1);
    again(0);
    again(824.8);
    expect(m.tokensHistory('b-ready')).toEqual([412.4, Number.NaN, 0, 824.8]);
    const row = renderTop(m, { sort: 'shard', filter: '', width: 160, height: 0, nowMs: NOW }).find((l) => l.startsWith('b-ready'));
    expect(row).toMatch(/^b-ready +READY +30s +4 +825 + {16}▅ ▁█ 0 /);
    // A shard the agent no longer lists takes its history with it.
    const s = m.status;
    if (!s) throw new Error('no status');
    m.applyStatus(create(StatusResponseSchema, { ...s, shards: [] }), NOW);
    expect(m.tokensHistory('b-ready')).toEqual([]);
  });

  it('writes tokens/s to fit its column, and - for unknown', () => {
    expect([formatRate(-1), formatRate(0), formatRate(3.25), formatRate(412.4), formatRate(123_456)]).toEqual(['-', '0.0', '3.3', '412', '123.5k']);
    expect([formatInFlight(-1), formatInFlight(0), formatInFlight(17)]).toEqual(['-', '0', '17']);
  });
});

describe('sparkline and bar', () => {
  it('scales to the largest value, newest on the right, padded while history is short', () => {
    expect(sparkline([0, 4, 8], 5)).toBe('  ▁▅█');
    expect(sparkline([8, Number.NaN, 4], 4)).toBe(' █ ▅');
    expect(sparkline([Number.NaN], 2)).toBe('  ');
    expect(bar(1, 4, 8)).toBe('██░░░░░░');
  });
});
