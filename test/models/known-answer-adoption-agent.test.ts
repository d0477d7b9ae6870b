import { readFileSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ModelPullState, ShardState, type ShardStatus, type StartShard } from '../../src/gen/llmgw/v1/agent_pb.js';
import { readManifest } from '../../src/models/model-manifest.js';
import { StoreLayout } from '../../src/models/store-layout.js';
import { readWeights } from '../../src/sim/fake-weights.js';
import { weightsTokenOffset } from '../../src/sim/openai-responses.js';
import { shardLogPath, shardStatePath } from '../../src/lib/shard-layout.js';
import { type AgentDirs, startAgentProcess, tempAgentDirs } from '../helpers/agent-process.js';
import { doubleStart } from '../helpers/double-shards.js';
import { freePort, until } from '../helpers/engine-processes.js';
import { runCli } from '../helpers/run-cli.js';
import { isRegister, shardIs } from '../helpers/sim-shards.js';
import { bytes } from './fake-hub.js';
import { llamaFiles, prefetch, startStoreAgent, useHub } from '../helpers/store-agent.js';

/*
 * Issue 51 item 4 at adoption: an agent restarted while a vLLM double serves
 * asks the adopted engine its known answer against the node's record for
 * (content digest, profile, engine version), kept in the shard's state file,
 * before it says READY. The double reads its weights again on SIGUSR2
 * (fake-vllm.ts), as a weight daemon serving another checkpoint would.
 */

const hub = useHub({ 'acme/llama': llamaFiles({ shardBytes: [120_000, 80_000], seeds: [31, 32] }) });

interface ShardJson {
  shardId: string;
  state: string;
  error?: string;
  pid?: number;
}

describe('the known answer at adoption (issue 51)', () => {
  it('an adopted engine answering as before is READY; one serving another checkpoint is FAILED naming both answers', { timeout: 180_000 }, async () => {
    const dirs: AgentDirs = tempAgentDirs('llmgw-adopt-answer-');
    const started = await startStoreAgent(hub, dirs);
    const { plane, cacheDir, yaml } = started;
    let agent = started.agent;
    expect((await prefetch(plane, 'acme/llama')).state).toBe(ModelPullState.DONE);

    const s: StartShard = doubleStart('vllm', 'a1', 0, { model: 'acme/llama', args: ['--sim-read-weights'] });
    (s.profile as NonNullable<StartShard['profile']>).name = 'adopted';
    s.httpPort = await freePort();
    const ready = plane.cp.waitFor('node-a', shardIs('a1', ShardState.READY, ShardState.FAILED), 30_000);
    plane.cp.send('node-a', { case: 'start', value: s });
    const first = (await ready).msg.value as ShardStatus;
    expect([first.state, first.error], first.lastOutput.join('\n')).toEqual([ShardState.READY, '']);
    expect(first.modelDigest).toMatch(/^sha256:[0-9a-f]{64}$/);
    // The key's first part, kept for the next agent.
    expect(JSON.parse(readFileSync(shardStatePath(dirs.stateDir, 'a1'), 'utf8'))).toMatchObject({ modelDigest: first.modelDigest });

    /** The agent killed (its engines keep running) and started again; the adopted shard as `ctl status` shows it once judged. */
    const restart = async (): Promise<ShardJson> => {
      await agent.stop();
      const registered = plane.cp.waitFor('node-a', isRegister, 20_000);
      agent = startAgentProcess({ server: plane.url, dirs, extraYaml: yaml });
      await registered;
      // Adopted before it registers, the verdict may ride in Register: read it from the agent.
      await until(() => agent.logs().some((l) => l.msg === 'shard state changed' && l.shard === 'a1' && l.from === 'STARTING'), 'the adopted shard to leave STARTING', 60_000);
      const r = await runCli(['ctl', 'status', '--all', '--json', '--socket', dirs.socket]);
      const shard = (JSON.parse(r.stdout) as { shards?: ShardJson[] }).shards?.find((x) => x.shardId === 'a1');
      if (!shard) throw new Error(`ctl status lists no a1: ${r.stdout}`);
      return shard;
    };

    // Unchanged: asked, the same answer, READY, with the content digest it had.
    const same = await restart();
    expect([same.state, same.error ?? '', same.pid]).toEqual(['SHARD_STATE_READY', '', first.pid]);
    // Against the record of the content the launching agent verified, kept in the state file.
    expect(agent.logs().find((l) => l.msg === 'known answer checked at start' && l.shard === 'a1')).toMatchObject({ verdict: 'same', digest: first.modelDigest, profile: 'adopted' });

    // Another checkpoint of the same layout served by the same process while no agent runs.
    await agent.stop();
    const layout = new StoreLayout(cacheDir);
    const manifest = await readManifest(layout, 'acme/llama');
    const commit = manifest?.refs.main as string;
    const env = { HF_HUB_CACHE: join(cacheDir, 'hub'), HF_HUB_OFFLINE: '1' };
    const before = weightsTokenOffset((await readWeights('acme/llama', 'main', env)).digest);
    const link = layout.pointerPath('acme/llama', commit, 'model-00001-of-00002.safetensors');
    const other = join(cacheDir, 'other-checkpoint.safetensors');
    unlinkSync(link);
    symlinkSync(other, link);
    // Bytes whose answer is not among the recorded one's near ties (the double's top 5 are its next words).
    for (let seed = 200; ; seed++) {
      writeFileSync(other, bytes(120_000, seed));
      const now = weightsTokenOffset((await readWeights('acme/llama', 'main', env)).digest);
      if ((before - now + 11) % 11 > 4) break;
    }
    process.kill(first.pid, 'SIGUSR2');
    const log = shardLogPath(dirs.logDir, 'a1');
    await until(() => readFileSync(log, 'utf8').includes('weights read again (SIGUSR2)'), 'the double to read its weights again', 20_000);
    const swapped = await restart();
    expect([swapped.state, swapped.pid]).toEqual(['SHARD_STATE_FAILED', first.pid]);
    expect(swapped.error).toMatch(/known answer differs for the model's content sha256:[0-9a-f]{64} \(profile adopted, engine .+\): it answers "(.+)" to ".+", where it answered "(.+)" before/);
    const [, now, then] = /it answers "(.+)" to ".+", where it answered "(.+)" before/.exec(swapped.error ?? '') ?? [];
    expect(now).not.toBe(then);
  });
});
