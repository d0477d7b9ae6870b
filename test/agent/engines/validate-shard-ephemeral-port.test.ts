import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { validateShard } from '../../../src/agent/engines/validate-shard.js';
import { VllmEngine } from '../../../src/agent/engines/vllm/vllm-engine.js';
import { IP_LOCAL_PORT_RANGE } from '../../../src/lib/ephemeral-port-range.js';
import { context, shard } from './engine-fixtures.js';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-validate-port-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const range = join(dir, 'ip_local_port_range');
writeFileSync(range, '32768\t60999\n');
const opts = { engine: 'vllm', executable: process.execPath, executableHint: 'set engines.vllm.command', allowedEnv: [], portRangePath: range };

describe('validateShard: ports in the ephemeral range', () => {
  it('refuses an http_port inside the range, naming it and what to do', async () => {
    await expect(validateShard(shard({ httpPort: 40000 }), context(), opts)).rejects.toThrow(
      "port 40000 is inside this node's ephemeral port range 32768-60999 (net.ipv4.ip_local_port_range), where an outgoing connection can take it; use a port outside it",
    );
    await expect(validateShard(shard({ httpPort: 32768 }), context(), opts)).rejects.toThrow('ephemeral port range 32768-60999');
  });

  it('accepts ports outside it, and a node whose range cannot be read', async () => {
    await expect(validateShard(shard({ httpPort: 18000 }), context(), opts)).resolves.toBe(process.execPath);
    await expect(validateShard(shard({ httpPort: 61000 }), context(), opts)).resolves.toBe(process.execPath);
    await expect(validateShard(shard({ httpPort: 40000 }), context(), { ...opts, portRangePath: join(dir, 'absent') })).resolves.toBe(process.execPath);
  });

  it('does not judge the port of a rank that serves no HTTP', async () => {
    const worker = shard({ nnodes: 2, rank: 1, httpPort: 40000, leaderAddr: '10.0.0.1', leaderPort: 29500, profile: { tensorParallelSize: 4 } });
    await expect(validateShard(worker, context(), opts)).resolves.toBe(process.execPath);
  });

  it('refuses a leader_port inside the range on rank 0, which binds it, and not on the ranks that connect to it', async () => {
    const rank = (r: number) =>
      shard({ nnodes: 2, rank: r, httpPort: r === 0 ? 18000 : 0, leaderAddr: '10.0.0.1', leaderPort: 45000, profile: { tensorParallelSize: 4 } });
    await expect(validateShard(rank(0), context(), opts)).rejects.toThrow(
      "leader_port 45000 is inside this node's ephemeral port range 32768-60999 (net.ipv4.ip_local_port_range), where an outgoing connection can take it; use a port outside it",
    );
    await expect(validateShard(rank(1), context(), opts)).resolves.toBe(process.execPath);
  });

  it('refuses through an engine against this node\'s real range', async () => {
    const [low, high] = readFileSync(IP_LOCAL_PORT_RANGE, 'utf8').trim().split(/\s+/).map(Number) as [number, number];
    const engine = new VllmEngine({ command: [process.execPath], env: {}, extraArgs: [] }, 'eth0');
    await expect(engine.validate(shard({ httpPort: low }), context())).rejects.toThrow(`ephemeral port range ${low}-${high}`);
  });
});
