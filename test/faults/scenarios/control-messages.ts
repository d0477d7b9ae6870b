import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { create } from '@bufbuild/protobuf';
import { DrainShardSchema, ShardState, type StartShard } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { simStart } from '../../helpers/sim-shards.js';
import { type FaultHarness, type Scenario, freePort, processesWritingUnder, readCmdline } from './fault-harness.js';

/**
 * Bad commands from the control plane. Each is answered with FAILED and a
 * reason that names the problem; nothing is launched for it; and the
 * stream carries on (no re-registration, and a good command still works).
 */

const S = ShardState;
export const VLLM_SHAPED_ENGINE = fileURLToPath(new URL('../fixtures/vllm-shaped-engine.mjs', import.meta.url));

/** The agent's `vllm` engine runs the fixture: the sim behind vLLM's command line. */
export const VLLM_FIXTURE_YAML = `engines:\n  vllm:\n    command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(VLLM_SHAPED_ENGINE)}]\n`;

interface Refusal {
  what: string;
  spec: StartShard;
  reason: RegExp;
}

/** Sends a start that must be refused, and checks it was, without a launch. */
async function expectRefused(h: FaultHarness, r: Refusal): Promise<void> {
  const id = r.spec.shardId;
  const before = processesWritingUnder(h.dirs.logDir).length;
  const answer = h.waitShard(id, [S.STARTING, S.READY, S.FAILED], 20_000);
  h.expectFailed.add(id);
  h.start(r.spec);
  const st = await answer;
  assert.equal(S[st.state], 'FAILED', `${r.what}: answered ${S[st.state]} instead of FAILED`);
  assert.match(st.error, r.reason, `${r.what}: unclear reason`);
  assert.equal(processesWritingUnder(h.dirs.logDir).length, before, `${r.what}: something was launched`);
  assert.equal(
    h.cp.messages('node-a').filter((m) => m.msg.case === 'shard' && m.msg.value.shardId === id && m.msg.value.state === S.STARTING).length,
    0,
    `${r.what}: reported STARTING, so it was launched`,
  );
}

function withSpec(base: StartShard, tweak: (s: StartShard) => void): StartShard {
  tweak(base);
  return base;
}

export const badControlMessages: Scenario = {
  name: 'bad-control-messages',
  title: 'bad commands are each answered FAILED with a clear reason, launch nothing, and leave the stream alive',
  timeoutMs: 120_000,
  async run(h) {
    await h.boot({ extraYaml: VLLM_FIXTURE_YAML });
    const port = await freePort();

    // A shard that holds GPU 0 and the port, for the conflicts below.
    const holderReady = h.waitShard('holder', [S.READY, S.FAILED]);
    h.start(simStart('holder', port));
    const holder = await holderReady;
    assert.equal(S[holder.state], 'READY', holder.error);
    h.keepsServing('holder', holder.pid, port);

    const busy = createServer();
    // Not port 0: the kernel's pick is in the ephemeral range, which validation refuses first.
    const strangerPort = await freePort();
    await new Promise<void>((resolve) => busy.listen(strangerPort, '0.0.0.0', resolve));
    h.defer(() => busy.close());
    const busyPort = (busy.address() as { port: number }).port;

    const refusals: Refusal[] = [];
    const invalidIds = ['', '../../etc/passwd', 'a/b', 'x'.repeat(129), '-leading-dash', '.hidden', 'spa ce', 'ünïcödé', 'nul\0byte', 'semi;colon'];
    for (const id of invalidIds) refusals.push({ what: `shard id ${JSON.stringify(id)}`, spec: simStart(id, port), reason: /invalid shard id/ });
    const free = () => simStart(`bad-${refusals.length}`, 0);
    const add = (what: string, reason: RegExp, tweak: (s: StartShard) => void) => {
      const spec = free();
      spec.httpPort = port + 1;
      spec.gpuIndices = [5];
      refusals.push({ what, spec: withSpec(spec, tweak), reason });
    };
    add('unknown engine', /unknown engine "tensorrt-llm"; known engines: vllm, sglang, sim/, (s) => {
      if (s.profile) s.profile.engine = 'tensorrt-llm';
    });
    add('GPU index 8 on an 8-GPU node', /GPU 8 does not exist on this node/, (s) => {
      s.gpuIndices = [8];
    });
    add('GPU index -1', /GPU -1 does not exist on this node/, (s) => {
      s.gpuIndices = [-1];
    });
    add('GPU index 2^31-1', /GPU 2147483647 does not exist on this node/, (s) => {
      s.gpuIndices = [2147483647];
    });
    add('GPU listed twice', /GPU 3 is listed twice/, (s) => {
      s.gpuIndices = [3, 3];
      if (s.profile) s.profile.tensorParallelSize = 2;
    });
    add('GPU held by another shard', /GPU 0 is held by shard holder/, (s) => {
      s.gpuIndices = [0];
    });
    add('port 0', /http_port 0 is not in 1\.\.65535/, (s) => {
      s.httpPort = 0;
    });
    add('port 65536', /http_port 65536 is not in 1\.\.65535/, (s) => {
      s.httpPort = 65536;
    });
    add('port in use by another shard', /http_port \d+ is already in use/, (s) => {
      s.httpPort = port;
      s.gpuIndices = [4];
    });
    add('port in use by a stranger', /http_port \d+ is already in use/, (s) => {
      s.httpPort = busyPort;
      s.gpuIndices = [4];
    });
    add('nnodes 2 without a leader', /nnodes 2 requires leader_addr/, (s) => {
      s.nnodes = 2;
    });
    add('10,000 args', /the engine command has 100\d\d arguments; at most 4096 are accepted/, (s) => {
      if (s.profile) s.profile.args = Array.from({ length: 10_000 }, (_, i) => `--arg-${i}`);
    });
    add('a 1 MiB env value', /HF_BIG_VALUE is 1048576 bytes/, (s) => {
      if (s.profile) s.profile.env = { HF_BIG_VALUE: 'x'.repeat(1024 * 1024) };
    });
    for (const r of refusals) await expectRefused(h, r);

    // Stop and drain of what is not there, or cannot be named, are answered too.
    const stopBad = h.waitShard('../x', [S.FAILED]);
    h.stop('../x');
    assert.match((await stopBad).error, /stop refused: invalid shard id/);
    const drainNone = h.waitShard('nobody', [S.FAILED]);
    h.send({ case: 'drain', value: create(DrainShardSchema, { shardId: 'nobody' }) });
    assert.match((await drainNone).error, /drain refused: no running shard "nobody"/);
    h.expectFailed.add('../x');
    h.shards.add('../x');
    h.shards.add('nobody');

    // Unicode model names work end to end (argv, /v1/models, readiness).
    const uniPort = await freePort();
    const model = 'モデル/Llama-3-🦙-ßig';
    const uniReady = h.waitShard('unicode', [S.READY, S.FAILED]);
    h.start(
      withSpec(simStart('unicode', uniPort, { gpu: 1 }), (s) => {
        if (s.profile) {
          s.profile.model = model;
          s.profile.servedModelName = model;
        }
      }),
    );
    const uni = await uniReady;
    assert.equal(S[uni.state], 'READY', uni.error);
    const models = (await (await fetch(`http://127.0.0.1:${uniPort}/v1/models`)).json()) as { data: { id: string }[] };
    assert.deepEqual(models.data.map((m) => m.id), [model]);
    h.keepsServing('unicode', uni.pid, uniPort);

    // Shell metacharacters reach the engine literally: argv, never a shell.
    const pwned = join(h.root, 'pwned');
    const nasty = ['; rm -rf /', `$(touch ${pwned})`, `\`touch ${pwned}\``, '&& echo hi', '| cat', `> ${pwned}`, '*', '~', '"quoted"', "'single'", '\\', '$HOME', 'a\nb'];
    const metaPort = await freePort();
    const metaReady = h.waitShard('meta', [S.READY, S.FAILED]);
    h.start(
      withSpec(simStart('meta', metaPort, { args: nasty, gpu: 2 }), (s) => {
        if (s.profile) s.profile.engine = 'vllm';
      }),
    );
    const meta = await metaReady;
    assert.equal(S[meta.state], 'READY', meta.error);
    const argv = readCmdline(meta.pid);
    assert.deepEqual(argv.slice(-nasty.length), nasty, 'the arguments reached the engine changed');
    assert.equal(existsSync(pwned), false, 'a shell ran the arguments');
    h.keepsServing('meta', meta.pid, metaPort);

    assert.equal(h.registrations(), 1, 'the stream broke: the agent registered again');
    return { dataLost: 0 };
  },
};

export const controlMessageScenarios: Scenario[] = [badControlMessages];
