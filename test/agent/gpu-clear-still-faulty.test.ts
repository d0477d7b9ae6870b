import { cpSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { type AgentMessage, type GpuEvent, GpuEventKind, ShardState, type ShardStatus } from '../../src/gen/llmgw/v1/agent_pb.js';
import { agentDirs, cleanUpEnginesAfterTest, startAgentProcess } from '../helpers/agent-process.js';
import { freePort } from '../helpers/engine-processes.js';
import { GPU_FIXTURES, replaceDataSetFile } from '../helpers/fake-gpus.js';
import { runCli } from '../helpers/run-cli.js';
import { isRegister, shardIs, simStart } from '../helpers/sim-shards.js';
import { startControlPlane } from '../helpers/start-control-plane.js';

/*
 * Walkthrough 4, O1: `ctl gpu clear` on a GPU that nvidia-smi still reads as
 * "[GPU requires reset]" put its shard back to READY for good, because the
 * scan's fault was raised only when the inventory changed. Each scan now
 * judges the GPUs again. A real agent reads the fake nvidia-smi's `fault`
 * data set (GPU 2 requires a reset), a real control plane and sim engine.
 */

const FAULTY_ROW_2 = readFileSync(join(GPU_FIXTURES, 'fault', 'query-gpu.csv'), 'utf8')
  .split('\n')
  .find((l) => l.startsWith('2, ')) as string;

/** Row `index` of `csv` with its readings replaced by nvidia-smi's "[GPU requires reset]", or by GPU 1's sound ones. */
function withRow(csv: string, index: number, how: 'faulty' | 'sound'): string {
  const lines = csv.split('\n');
  const at = lines.findIndex((l) => l.startsWith(`${index}, `));
  const [i, uuid, name, pci] = (lines[at] as string).split(', ');
  const readings = how === 'faulty' ? FAULTY_ROW_2.split(', ').slice(4) : (lines.find((l) => l.startsWith('1, ')) as string).split(', ').slice(4);
  lines[at] = [i, uuid, name, pci, ...readings].join(', ');
  return lines.join('\n');
}

const isGpuEvent = (gpu: number, kind: GpuEventKind) => (m: AgentMessage) => m.msg.case === 'gpuEvent' && m.msg.value.gpuIndex === gpu && m.msg.value.kind === kind;

async function gpuHealthy(metricsPort: number, gpu: number): Promise<string | undefined> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  return text.split('\n').find((l) => l.startsWith('llmgw_gpu_healthy{') && l.includes(`gpu="${gpu}"`))?.split(' ').at(-1);
}

/** A control plane and an agent on a copy of the `fault` data set, its GPU 2 sound for now, scanned every second. */
async function agentOnFaultDataset() {
  const plane = await startControlPlane();
  const dirs = agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-gpuclear-')));
  onTestFinished(() => rmSync(dirs.root, { recursive: true, force: true }));
  cleanUpEnginesAfterTest(dirs);
  const dataset = join(dirs.root, 'gpus');
  cpSync(join(GPU_FIXTURES, 'fault'), dataset, { recursive: true });
  const csv = join(dataset, 'query-gpu.csv');
  const faulty = readFileSync(csv, 'utf8');
  replaceDataSetFile(csv, withRow(faulty, 2, 'sound'));
  const metricsPort = await freePort();
  const registered = plane.cp.waitFor('node-a', isRegister, 20_000);
  startAgentProcess({ server: plane.url, dirs, discoveryInterval: '1s', extraYaml: `metrics_addr: 127.0.0.1:${metricsPort}\n`, env: { LLMGW_FAKE_GPUS: dataset } });
  await registered;
  const ready = plane.cp.waitFor('node-a', shardIs('s1', ShardState.READY), 30_000);
  plane.cp.send('node-a', { case: 'start', value: simStart('s1', await freePort(), { gpu: 2 }) });
  await ready;
  // The fault, as the data set has it: the next scan reads GPU 2 as "requires reset".
  const fault = plane.cp.waitFor('node-a', isGpuEvent(2, GpuEventKind.GPU_LOST), 20_000);
  const unhealthy = plane.cp.waitFor('node-a', shardIs('s1', ShardState.UNHEALTHY), 20_000);
  replaceDataSetFile(csv, faulty);
  expect(((await fault).msg.value as GpuEvent).message).toBe('GPU requires reset');
  await unhealthy;
  return { cp: plane.cp, csv, faulty, socket: dirs.socket, metricsPort };
}

describe('ctl gpu clear on a GPU nvidia-smi still reads as faulty (walkthrough 4, O1)', () => {
  it('raises the fault again at the next scan: a GPU_LOST event after the CLEARED_BY_OPERATOR one, the shard UNHEALTHY again, llmgw_gpu_healthy 0', async () => {
    const a = await agentOnFaultDataset();
    const cleared = a.cp.waitFor('node-a', isGpuEvent(2, GpuEventKind.CLEARED_BY_OPERATOR), 20_000);
    const readyAgain = a.cp.waitFor('node-a', shardIs('s1', ShardState.READY), 20_000);
    const raisedAgain = cleared.then(() => a.cp.waitFor('node-a', isGpuEvent(2, GpuEventKind.GPU_LOST), 20_000));
    const unhealthyAgain = readyAgain.then(() => a.cp.waitFor('node-a', shardIs('s1', ShardState.UNHEALTHY), 20_000));
    const out = await runCli(['ctl', 'gpu', 'clear', '2', '--reason', 'reset with nvidia-smi -r -i 2', '--socket', a.socket]);
    expect(out.exitCode).toBe(0);
    expect(out.stdout).toContain('GPU 2: cleared GPU requires reset');
    // The clear itself happens (the operator is heard), then the reading, still faulty, wins.
    await cleared;
    await readyAgain;
    const again = (await raisedAgain).msg.value as GpuEvent;
    expect(again.message).toBe('GPU requires reset');
    expect(again.shardIds).toEqual(['s1']);
    expect(((await unhealthyAgain).msg.value as ShardStatus).error).toBe('GPU 2: GPU requires reset');
    expect(await gpuHealthy(a.metricsPort, 2)).toBe('0');
    const status = JSON.parse((await runCli(['ctl', 'status', '--json', '--socket', a.socket])).stdout) as { gpus: { index: number; healthy: boolean; fault?: string }[]; shards: { shardId: string; state: string }[] };
    expect(status.gpus.find((g) => g.index === 2)).toMatchObject({ healthy: false, fault: 'GPU requires reset' });
    expect(status.shards.find((s) => s.shardId === 's1')?.state).toBe('SHARD_STATE_UNHEALTHY');
  }, 120_000);

  it('look-alike: a GPU whose fault really went (reset, then cleared) stays cleared through the scans after the clear', async () => {
    const a = await agentOnFaultDataset();
    const sound = withRow(a.faulty, 2, 'sound');
    const ready = a.cp.waitFor('node-a', shardIs('s1', ShardState.READY), 20_000);
    replaceDataSetFile(a.csv, sound);
    // The scan may clear it before the operator does ("no fault was held" then): either way, it is sound.
    const out = await runCli(['ctl', 'gpu', 'clear', '2', '--reason', 'reset with nvidia-smi -r -i 2', '--socket', a.socket]);
    expect(out.exitCode).toBe(0);
    await ready;
    const seenSince = a.cp.messages('node-a').length;
    // A scan that started after the clear: it reads GPU 0 faulty, and GPU 2 as it is now.
    const marker = a.cp.waitFor('node-a', isGpuEvent(0, GpuEventKind.GPU_LOST), 20_000);
    replaceDataSetFile(a.csv, withRow(sound, 0, 'faulty'));
    await marker;
    const since = a.cp.messages('node-a').slice(seenSince);
    expect(since.filter(isGpuEvent(2, GpuEventKind.GPU_LOST))).toEqual([]);
    expect(since.filter(shardIs('s1', ShardState.UNHEALTHY))).toEqual([]);
    expect(await gpuHealthy(a.metricsPort, 2)).toBe('1');
  }, 120_000);
});
