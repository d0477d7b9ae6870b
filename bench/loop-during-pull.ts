/**
 * The agent's event loop while it pulls a model (issue 52's in-place read on
 * the agent's own loop): the real agent with sim shards serving, its loop's
 * delay sampled inside it (a preloaded 10 ms timer, LOOPMON), `ctl status`
 * round trips over its admin socket and heartbeat spacing at the control
 * plane, before (baseline) and during a PrefetchModel of acme/big served by
 * a hub double in a process of its own (test/helpers/hub-process.ts).
 *   npx tsx bench/loop-during-pull.ts [rounds]
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { create } from '@bufbuild/protobuf';
import { type ModelPull, ModelPullState, PrefetchModelSchema, ShardState } from '../src/gen/llmgw/v1/agent_pb.js';
import { openAdminClient } from '../src/ctl/open-admin-client.js';
import { agentConfigYaml } from '../test/helpers/agent-config-yaml.js';
import { spawnAgentProcess } from '../test/helpers/spawn-agent-process.js';
import { isRegister, shardIs, simStart } from '../test/helpers/sim-shards.js';
import { freePort } from '../test/helpers/engine-processes.js';
import { startHubProcess } from '../test/helpers/hub-process.js';
import { cleanup, controlPlane, newRoot } from './bench-support.js';

const LOOPMON = fileURLToPath(new URL('./loop-delay-preload.mjs', import.meta.url));
const SHARDS = 4;
const BASELINE_MS = 8000;

function pct(xs: number[], p: number): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] as number;
}
const fmt = (xs: number[]) => `p50 ${pct(xs, 50).toFixed(1)} p99 ${pct(xs, 99).toFixed(1)} max ${Math.max(...xs).toFixed(1)} (n ${xs.length})`;

async function main(): Promise<void> {
  // The agent's directories, control plane and engines go with bench-support's cleanup(), also on Ctrl-C or
  // SIGTERM (below): a run stopped early left its sim engines running, as engines outlive their agent.
  const dirs = newRoot('looppull');
  const root = dirs.root;
  const hub = await startHubProcess({ files: 2, mib: 256 });
  const hubUrl = hub.url;
  const { cp, url } = await controlPlane();
  const loopFile = join(root, 'loop.txt');
  const cfg = join(root, 'agent.yaml');
  writeFileSync(
    cfg,
    agentConfigYaml({
      server: url,
      dirs,
      heartbeat: '1s',
      extraYaml: `models:\n  cache_dir: ${join(root, 'models')}\n  budget: 4GiB\n  hub:\n    endpoint: ${hubUrl}\n`,
    }),
  );
  const registered = cp.waitFor('node-a', isRegister, 30_000);
  const agent = spawnAgentProcess(cfg, { NODE_OPTIONS: `--import=${LOOPMON}`, LOOPMON_FILE: loopFile });
  const heartbeats: number[] = [];
  const unhealthy: string[] = [];
  cp.on('message', (_n, m) => {
    if (m.msg.case === 'heartbeat') heartbeats.push(Date.now());
    if (m.msg.case === 'shard' && m.msg.value.state === ShardState.UNHEALTHY) unhealthy.push(`${Date.now()} ${m.msg.value.shardId} ${m.msg.value.error}`);
  });
  try {
    await registered;
    for (let i = 0; i < SHARDS; i++) {
      const ready = cp.waitFor('node-a', shardIs(`s${i}`, ShardState.READY), 30_000);
      cp.send('node-a', { case: 'start', value: simStart(`s${i}`, await freePort(), { gpu: [0, 1, 2, 5][i] }) });
      await ready;
    }
    const admin = await openAdminClient(dirs.socket);
    const rtts: [number, number][] = [];
    let polling = true;
    const poll = (async () => {
      while (polling) {
        const t0 = performance.now();
        await admin.client.status({});
        rtts.push([Date.now(), performance.now() - t0]);
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    const baseFrom = Date.now();
    await new Promise((r) => setTimeout(r, BASELINE_MS));
    const pullFrom = Date.now();
    const ended = cp.waitFor('node-a', (m) => m.msg.case === 'modelPull' && [ModelPullState.DONE, ModelPullState.FAILED].includes(m.msg.value.state), 600_000);
    cp.send('node-a', { case: 'prefetch', value: create(PrefetchModelSchema, { repo: 'acme/big', revision: 'main' }) });
    const pull = (await ended).msg.value as ModelPull;
    const pullTo = Date.now();
    await new Promise((r) => setTimeout(r, 1000));
    polling = false;
    await poll;
    admin.close();
    if (pull.state !== ModelPullState.DONE) throw new Error(`pull failed: ${pull.error}`);
    const loop = readFileSync(loopFile, 'utf8').trim().split('\n').map((l) => l.split(' ').map(Number) as [number, number]);
    const within = <T extends [number, number]>(xs: T[], a: number, b: number) => xs.filter(([t]) => t >= a && t < b).map(([, v]) => v);
    const gaps = (a: number, b: number) => heartbeats.filter((t, i) => i > 0 && t >= a && t < b).map((t) => t - (heartbeats[heartbeats.indexOf(t) - 1] as number));
    const mib = Number(pull.bytesTotal) / 1024 / 1024;
    console.log(`load ${loadavg().map((x) => x.toFixed(1)).join(' ')}; pull ${mib.toFixed(0)} MiB in ${((pullTo - pullFrom) / 1000).toFixed(1)} s = ${(mib / ((pullTo - pullFrom) / 1000)).toFixed(0)} MiB/s`);
    console.log(`loop delay ms   base: ${fmt(within(loop, baseFrom, pullFrom))}`);
    console.log(`loop delay ms   pull: ${fmt(within(loop, pullFrom, pullTo))}`);
    console.log(`ctl status ms   base: ${fmt(within(rtts, baseFrom, pullFrom))}`);
    console.log(`ctl status ms   pull: ${fmt(within(rtts, pullFrom, pullTo))}`);
    console.log(`heartbeat gap   base: ${fmt(gaps(baseFrom, pullFrom))}`);
    console.log(`heartbeat gap   pull: ${fmt(gaps(pullFrom, pullTo))}`);
    console.log(`UNHEALTHY: ${unhealthy.length} ${unhealthy.slice(0, 3).join('; ')}`);
  } catch (err) {
    console.log(agent.records.slice(-30).map((r) => JSON.stringify(r)).join('\n'));
    throw err;
  } finally {
    agent.child.kill('SIGKILL');
    await agent.child.catch(() => {});
    await hub.stop();
    await cleanup();
  }
}

for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => void cleanup().then(() => process.exit(130)));
await main();
