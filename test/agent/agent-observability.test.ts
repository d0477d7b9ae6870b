import { execFileSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Inventory } from '../../src/gen/llmgw/v1/agent_pb.js';
import { type AgentDirs, type AgentProcess, agentDirs, endAgentFixture, startAgentProcess, tempAgentDirs } from '../helpers/agent-process.js';
import { freePort, until } from '../helpers/engine-processes.js';
import { listenNotifySocket } from '../helpers/notify-socket.js';
import { replaceDataSetFile } from '../helpers/fake-gpus.js';
import { REPO_ROOT } from '../helpers/run-cli.js';
import { isRegister } from '../helpers/sim-shards.js';
import { type StartedControlPlane, startControlPlane } from '../helpers/start-control-plane.js';

function newDirs() {
  return tempAgentDirs('llmgw-obs-');
}

describe('llmgw agent run, as systemd and Prometheus see it', () => {
  /*
   * One agent for the first two tests, which only read what it says: to
   * systemd's notify socket, and on its metrics_addr. Each was an agent of
   * its own with the one setting, some 2 s of start-up each on this machine.
   */
  const f: { cp?: StartedControlPlane; agent?: AgentProcess; dirs?: AgentDirs; sock?: ReturnType<typeof listenNotifySocket>; metricsPort?: number } = {};
  let endSock: () => Promise<void> = async () => {};
  beforeAll(async () => {
    f.cp = await startControlPlane();
    f.dirs = agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-obs-')));
    f.sock = listenNotifySocket(f.dirs.root, (fn) => {
      endSock = fn;
    });
    await f.sock.ready;
    f.metricsPort = await freePort();
    f.agent = startAgentProcess({ server: f.cp.url, dirs: f.dirs, env: { NOTIFY_SOCKET: f.sock.path }, extraYaml: `metrics_addr: 127.0.0.1:${f.metricsPort}\n` });
  }, 60_000);
  afterAll(async () => {
    await endSock();
    await endAgentFixture(f);
  }, 60_000);

  it('tells systemd READY=1 once it is up', async () => {
    const { cp, sock } = f as Required<typeof f>;
    await cp.cp.waitFor('node-a', isRegister, 20_000);
    await until(() => sock.received().some((d) => d.split('\n').includes('READY=1')), 'READY=1 from the agent');
  });

  it('serves its metrics when metrics_addr is set', async () => {
    const { cp, metricsPort: port } = f as Required<typeof f>;
    await cp.cp.waitFor('node-a', (m) => m.msg.case === 'heartbeat', 20_000);
    let text = '';
    await until(async () => {
      text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      return /^llmgw_agent_connected 1$/m.test(text);
    }, 'llmgw_agent_connected 1');
    expect(text).toMatch(/^llmgw_agent_messages_sent_total\{type="heartbeat"\} \d+/m);
    expect(text).toMatch(/^llmgw_gpu_memory_used_bytes\{gpu="7",UUID="GPU-[^"]+",pci_bus_id="[^"]+"\} \d+/m);
    expect(text).toContain('# TYPE llmgw_agent_shards gauge');
  });

  it('sends GPU memory as nvidia-smi reports it now, from one long-lived nvidia-smi loop', async () => {
    const { cp, url } = await startControlPlane();
    const dirs = newDirs();
    const box = join(dirs.root, 'gpus');
    cpSync(join(REPO_ROOT, 'fixtures/gpu/hgx-h100x8'), box, { recursive: true });
    const agent = startAgentProcess({ server: url, dirs, env: { LLMGW_FAKE_GPUS: box } });
    await cp.waitFor('node-a', (m) => m.msg.case === 'heartbeat', 20_000);

    // Every GPU's memory.used changes to 1000 + its index.
    const csv = join(box, 'query-gpu.csv');
    const [header = '', ...rows] = readFileSync(csv, 'utf8').trimEnd().split('\n');
    const col = header.split(', ').indexOf('memory.used [MiB]');
    const changed = rows.map((r, i) => r.split(', ').map((cell, c) => (c === col ? `${1000 + i} MiB` : cell)).join(', '));
    replaceDataSetFile(csv, `${[header, ...changed].join('\n')}\n`);
    const want = rows.map((_, i) => 1000 + i);
    await cp.waitFor('node-a', (m) => m.msg.case === 'heartbeat' && m.msg.value.gpuMemoryUsedMb.join() === want.join(), 20_000);

    // One loop, started by the agent, not one nvidia-smi per heartbeat.
    const loops = execFileSync('pgrep', ['-f', '-P', String(agent.pid), 'fake-nvidia-smi.*--loop-ms'], { encoding: 'utf8' }).trim().split('\n');
    expect(loops).toHaveLength(1);
  });

  it('sends a new inventory when a GPU appears after boot, without a restart', async () => {
    const { cp, url } = await startControlPlane();
    const dirs = newDirs();
    // A copy of the 8-GPU box with its last GPU not yet visible.
    const box = join(dirs.root, 'gpus');
    cpSync(join(REPO_ROOT, 'fixtures/gpu/hgx-h100x8'), box, { recursive: true });
    const csv = join(box, 'query-gpu.csv');
    const full = readFileSync(csv, 'utf8');
    const lines = full.trimEnd().split('\n');
    replaceDataSetFile(csv, `${lines.slice(0, -1).join('\n')}\n`);

    const registered = cp.waitFor('node-a', isRegister, 20_000);
    startAgentProcess({
      server: url,
      dirs,
      env: { LLMGW_FAKE_GPUS: box },
      discoveryInterval: '300ms',
    });
    const reg = (await registered).msg.value as { inventory: Inventory };
    expect(reg.inventory.gpus).toHaveLength(7);

    const update = cp.waitFor('node-a', (m) => m.msg.case === 'inventory', 20_000);
    replaceDataSetFile(csv, full);
    const inv = (await update).msg.value as Inventory;
    expect(inv.gpus.map((g) => g.index)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  });
});
