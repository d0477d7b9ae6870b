/**
 * `--only 12,13` (issue 25): a stop that drains, and READY after the
 * engine's first answer, for each engine behaviour the agent judges apart:
 * the sim (`llmgw sim engine`), vLLM with tensor parallel 2 (bin/fake-vllm:
 * two worker processes, a drain only with --shutdown-timeout), for figure 12
 * also vLLM with data parallelism 2 (a drain only with one API server), and SGLang
 * (bin/fake-sglang: /health_generate takes over a second, the SIGTERM drain
 * looks for requests left every 5 s). Real agent, real engine processes; the
 * doubles are run as the agent runs vLLM and SGLang, through
 * engines.<name>.command.
 */
import { create } from '@bufbuild/protobuf';
import { DurationSchema } from '@bufbuild/protobuf/wkt';
import type { ControlPlane } from '../src/control/control-plane.js';
import { type AgentMessage, type ShardState as State, ShardState, type StartShard, StopShardSchema } from '../src/gen/llmgw/v1/agent_pb.js';
import { groupMembers } from '../test/helpers/engine-processes.js';
import { DOUBLE_ENGINES_YAML, doubleStart, streamChat } from '../test/helpers/double-shards.js';
import { consumeStream } from '../test/helpers/fake-engines.js';
import { isRegister, shardIs, simStart } from '../test/helpers/sim-shards.js';
import { controlPlane, freePort, median, newRoot, sleep, spawnAgent } from './bench-support.js';
import { BENCH_PROBE_MS, answers200, firstAnswer } from './first-answer.js';
import type { BenchRow } from './fleet-figure.js';

/**
 * supervisor.stop_grace for these figures: the production default, so that
 * a stop ends by the engine's own drain. The tests' 3 s is under SGLang's
 * first 5 s drain look: every SGLang stop would be the SIGKILL, and vLLM
 * would be given a 2 s --shutdown-timeout instead of 25 s.
 */
const STOP_GRACE = '30s';

/** Time per generated token, fixed, so the rest of a stream after StopShard is known. */
const TOKEN_LATENCY_MS = 20;
/** Tokens of the streamed completion in flight: 2 s of stream. */
const STREAM_TOKENS = 100;
/** StopShard is sent once this many tokens have arrived: 1.5 s of the stream remain. */
const STOP_AFTER_TOKENS = 25;

/** What the stop of a READY-figure shard may take: its drain is not measured there, and SGLang's would cost 5 s a sample. */
const SHORT_STOP_GRACE_S = 1n;

/** SGLang's drain loop sleeps this long before each look for requests left (S:python/sglang/srt/managers/tokenizer_manager.py:3114-3158). */
const SGLANG_DRAIN_POLL_MS = 5000;

interface Behaviour {
  label: string;
  engine: 'sim' | 'vllm' | 'sglang';
  /** What its shard ids are named after, when two behaviours share an engine. Default: engine. */
  key?: string;
  /** The path the agent's EngineWatch asks (SglangEngine.apiHealthPath). */
  healthPath: string;
  /** Processes of the engine's group when it serves: main and workers. */
  processes: number;
  spec(id: string, port: number, loadMs: number): StartShard;
}

const knobs = (loadMs: number) => ['--sim-load-time', `${loadMs}ms`, '--sim-token-latency', `${TOKEN_LATENCY_MS}ms`];

const BEHAVIOURS: readonly Behaviour[] = [
  {
    label: 'sim',
    engine: 'sim',
    healthPath: '/health',
    processes: 1,
    spec: (id, port, loadMs) => simStart(id, port, { args: ['--load-time', `${loadMs}ms`, '--token-latency', `${TOKEN_LATENCY_MS}ms`] }),
  },
  { label: 'vLLM double, TP 2', engine: 'vllm', healthPath: '/health', processes: 3, spec: (id, port, loadMs) => doubleStart('vllm', id, port, { gpus: [0, 1], args: knobs(loadMs) }) },
  // Main process, one scheduler (TP 1) and the detokenizer.
  { label: 'SGLang double', engine: 'sglang', healthPath: '/health_generate', processes: 3, spec: (id, port, loadMs) => doubleStart('sglang', id, port, { gpus: [0], args: knobs(loadMs) }) },
];

/**
 * Figure 12 only: vLLM with data parallelism 2 (TP 1 on each of 2 GPUs), a
 * main process and two workers. vLLM would run an API server per DP rank and
 * cut the stream on SIGTERM (V:vllm/entrypoints/cli/serve.py:107-124, 277-286,
 * 391-407); the agent runs one (--api-server-count 1), which drains. The
 * double does both (src/sim/fake-vllm.ts), so this row shows which one the
 * agent got (issue 36).
 */
const DP2_BEHAVIOUR: Behaviour = {
  label: 'vLLM double, DP 2',
  engine: 'vllm',
  key: 'vllm-dp2',
  healthPath: '/health',
  processes: 3,
  spec: (id, port, loadMs) => {
    const spec = doubleStart('vllm', id, port, { gpus: [0, 1], args: [...knobs(loadMs), '--data-parallel-size', '2'] });
    if (spec.profile) spec.profile.tensorParallelSize = 1;
    return spec;
  },
};

/** The agent both figures use: the doubles as the vllm and sglang engines, the sim enabled, stop_grace STOP_GRACE. */
async function agentWithDoubles(tag: string): Promise<ControlPlane> {
  const { cp, url } = await controlPlane();
  spawnAgent(url, newRoot(tag), { extraYaml: DOUBLE_ENGINES_YAML, stopGrace: STOP_GRACE });
  await cp.waitFor('node-a', isRegister, 30_000);
  return cp;
}

/** Starts `spec` and waits for READY; throws with the agent's reason when it FAILED. */
async function startReady(cp: ControlPlane, spec: StartShard, loadMs: number): Promise<{ pid: number }> {
  const ready = cp.waitFor('node-a', shardIs(spec.shardId, ShardState.READY, ShardState.FAILED), loadMs + 60_000);
  cp.send('node-a', { case: 'start', value: spec });
  const m = await ready;
  if (m.msg.case !== 'shard' || m.msg.value.state !== ShardState.READY) throw new Error(`shard ${spec.shardId} did not become READY: ${m.msg.case === 'shard' ? m.msg.value.error : m.msg.case}`);
  return { pid: m.msg.value.pid };
}

async function stopAndWait(cp: ControlPlane, id: string, graceS?: bigint): Promise<void> {
  const stopped = cp.waitFor('node-a', shardIs(id, ShardState.STOPPED), 60_000);
  const grace = graceS === undefined ? undefined : create(DurationSchema, { seconds: graceS });
  cp.send('node-a', { case: 'stop', value: create(StopShardSchema, { shardId: id, grace }) });
  await stopped;
}

interface StopSample {
  /** StopShard sent → STOPPED on the stream. */
  stoppedMs: number;
  /** StopShard sent → the stream's `data: [DONE]` (or its cut). */
  streamEndMs: number;
  tokens: number;
  done: boolean;
  /** Processes in the engine's group while it served. */
  processes: number;
}

/**
 * One stop in the middle of a stream: a READY shard is asked for
 * STREAM_TOKENS streamed tokens, and StopShard is sent when
 * STOP_AFTER_TOKENS have arrived.
 */
async function stopMidStream(cp: ControlPlane, b: Behaviour, id: string): Promise<StopSample> {
  const port = await freePort();
  const { pid } = await startReady(cp, b.spec(id, port, 0), 0);
  const processes = groupMembers(pid).length;
  const res = await streamChat(port, STREAM_TOKENS);
  if (res.status !== 200) throw new Error(`${b.label}: the streamed completion answered ${res.status}`);
  let t0 = 0;
  let stopped: Promise<number> | undefined;
  const stream = consumeStream(res, (n) => {
    if (n !== STOP_AFTER_TOKENS) return;
    stopped = cp.waitFor('node-a', shardIs(id, ShardState.STOPPED, ShardState.FAILED), 60_000).then((m) => {
      const st = m.msg.value as { state: State; error: string };
      if (st.state !== ShardState.STOPPED) throw new Error(`${b.label}: the stop ended ${ShardState[st.state]}: ${st.error}`);
      return performance.now();
    });
    t0 = performance.now();
    cp.send('node-a', { case: 'stop', value: create(StopShardSchema, { shardId: id }) });
  });
  const { tokens, done } = await stream;
  const streamEndAt = performance.now();
  if (!stopped) throw new Error(`${b.label}: the stream ended after ${tokens} tokens, before StopShard was to be sent`);
  const stoppedAt = await stopped;
  return { stoppedMs: stoppedAt - t0, streamEndMs: streamEndAt - t0, tokens, done, processes };
}

const ms = (x: number) => `${x.toFixed(0)} ms`;
const spread = (xs: number[]) => (xs.length > 1 ? ` (${ms(Math.min(...xs))}–${ms(Math.max(...xs))})` : '');

/** Figure 12: StopShard mid-stream → STOPPED, and whether the stream got every token. */
export async function stopDrainFigure(rows: BenchRow[], notes: string[], quick: boolean): Promise<void> {
  const cp = await agentWithDoubles('f12');
  const rounds = quick ? 2 : 5;
  const remainingMs = (STREAM_TOKENS - STOP_AFTER_TOKENS) * TOKEN_LATENCY_MS;
  for (const b of [...BEHAVIOURS, DP2_BEHAVIOUR]) {
    const samples: StopSample[] = [];
    for (let r = 0; r < rounds; r++) samples.push(await stopMidStream(cp, b, `stop-${b.key ?? b.engine}-${r}`));
    const stopped = samples.map((s) => s.stoppedMs);
    const ends = samples.map((s) => s.streamEndMs);
    const whole = samples.filter((s) => s.tokens === STREAM_TOKENS && s.done).length;
    const bound =
      b.engine === 'sglang'
        ? `its drain looks every ${SGLANG_DRAIN_POLL_MS / 1000} s: STOPPED ≥ the first look after the stream ends`
        : 'the rest of the stream, then the engine\'s exit';
    rows.push({
      figure: `12 StopShard mid-stream → STOPPED on the stream, ${b.label} (${STREAM_TOKENS} tokens at ${TOKEN_LATENCY_MS} ms, stopped after ${STOP_AFTER_TOKENS}), ${rounds} stops`,
      measured: `median ${ms(median(stopped))}${spread(stopped)}; ${whole}/${rounds} streams whole (${STREAM_TOKENS} tokens and [DONE])`,
      reference: `stream end after StopShard: median ${ms(median(ends))} (${remainingMs} ms of tokens left); bound: ${bound}`,
      target: 'every token arrives',
      met: whole === rounds,
    });
    const procs = [...new Set(samples.map((s) => s.processes))].join(', ');
    const group = procs === String(b.processes) ? `${procs} process(es) in the engine's group while serving, as expected` : `**${procs} process(es) in the engine's group while serving, ${b.processes} expected**`;
    notes.push(`12 ${b.label}: ${group}; per stop, StopShard → STOPPED ${stopped.map(ms).join(', ')}, tokens ${samples.map((s) => `${s.tokens}${s.done ? '' : ' (cut)'}`).join(', ')}`);
  }
  notes.push(
    `12 the agent runs with stop_grace ${STOP_GRACE} (its default), so vLLM gets --shutdown-timeout 25 and no stop here reaches the SIGKILL; the agent SIGTERMs the engine's main process only. STOPPED is timed at the in-process control plane from the moment StopShard is sent.`,
  );
}

interface ReadySample {
  /** The engine's first answer (health path 200 and model listed) → READY on the stream. */
  lagMs: number;
  /** The health request that first answered 200 was sent → READY on the stream. */
  sinceAskedMs: number;
}

/** One start: the engine loads `loadMs`, the bench probes it as figure 11 does, READY is timed as it arrives. */
async function answerToReady(cp: ControlPlane, b: Behaviour, id: string, loadMs: number): Promise<ReadySample> {
  const port = await freePort();
  let readyAt = Number.NaN;
  const onMessage = (nodeId: string, m: AgentMessage) => {
    if (nodeId === 'node-a' && shardIs(id, ShardState.READY)(m) && Number.isNaN(readyAt)) readyAt = performance.now();
  };
  cp.on('message', onMessage);
  const ac = new AbortController();
  try {
    const started = startReady(cp, b.spec(id, port, loadMs), loadMs);
    const answered = firstAnswer(port, ac.signal, b.healthPath);
    await started;
    // The bench's probe may still be in a /health_generate the agent's answered first: let it finish.
    const first = await Promise.race([answered, sleep(10_000).then(() => ({ askedAt: Number.NaN, answeredAt: Number.NaN }))]);
    ac.abort();
    if (Number.isNaN(first.answeredAt)) throw new Error(`${b.label}: the bench never saw ${b.healthPath} answer 200`);
    // READY before the bench saw an answer: the bench's own probe was late; the lag is then under its resolution.
    return { lagMs: Math.max(0, readyAt - first.answeredAt), sinceAskedMs: Math.max(0, readyAt - first.askedAt) };
  } finally {
    ac.abort();
    cp.off('message', onMessage);
    await stopAndWait(cp, id, SHORT_STOP_GRACE_S);
  }
}

/** Median time of `path` answering 200 on a serving engine: what one health check costs it. */
async function healthLatency(port: number, path: string, n: number): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    if (!(await answers200(port, path))) throw new Error(`${path} did not answer 200`);
    times.push(performance.now() - t0);
  }
  return median(times);
}

/** Figure 13: the engine's first answer to its health path → READY on the stream, per engine behaviour. */
export async function readyAfterAnswerFigure(rows: BenchRow[], notes: string[], quick: boolean): Promise<void> {
  const cp = await agentWithDoubles('f13');
  const samples = quick ? 3 : 10;
  const loadMs = 1000;
  for (const b of BEHAVIOURS) {
    const got: ReadySample[] = [];
    for (let n = 0; n < samples; n++) got.push(await answerToReady(cp, b, `ready-${b.engine}-${n}`, loadMs));
    const lag = got.map((s) => s.lagMs);
    const asked = got.map((s) => s.sinceAskedMs);
    const port = await freePort();
    const id = `health-${b.engine}`;
    await startReady(cp, b.spec(id, port, 0), 0);
    const healthMs = await healthLatency(port, b.healthPath, b.engine === 'sglang' ? 3 : 20);
    await stopAndWait(cp, id, SHORT_STOP_GRACE_S);
    rows.push({
      figure: `13 engine answers ${b.healthPath} → READY on the stream, ${b.label}, load 1 s, ${samples} samples`,
      measured: `median ${ms(median(lag))}, max ${ms(Math.max(...lag))}; from the health request sent: median ${ms(median(asked))}`,
      reference: `one ${b.healthPath} on a serving engine: ${healthMs.toFixed(1)} ms`,
      target: '<= 100 ms max from the answer',
      met: Math.max(...lag) <= 100,
    });
  }
  notes.push(
    `13 follows figure 11: the bench asks each loading engine its health path and /v1/models every ${BENCH_PROBE_MS} ms (bench/first-answer.ts) and takes the first time both answered 200; READY is timed as it arrives at the in-process control plane. "From the health request sent" is from when the request that first answered 200 left the bench: for SGLang it holds the ≥ 1 s its /health_generate takes by design (a 1-token generation, then a 1 s sleep before it looks), which no agent can take off; from the answer itself SGLang's lag is the agent's, as for the others.`,
  );
}
