import { rmSync, writeFileSync } from 'node:fs';
import { Listr } from 'listr2';
import { progressListrOptions } from '../lib/listr-options.js';
import { shardLogDir } from '../lib/shard-layout.js';
import type { Deployment } from '../control/deployment.js';
import { loadDeployment, parseDeployment } from '../control/load-deployment.js';
import type { ReplicaView } from '../control/replica-view.js';
import { configError, usageError } from '../lib/errors.js';
import { createLogger } from '../lib/logger.js';
import { onShutdownSignals } from '../lib/on-shutdown-signals.js';
import { DEV_NODE_ID } from './dev-agent-config-yaml.js';
import { DevCluster, type DevStopReport } from './dev-cluster.js';
import { checkDeploymentFitsOneNode, DEV_HUB_MODEL, type DevEngine, devDeploymentYaml, devModelFromHub } from './dev-deployment-yaml.js';
import { FakeHub, devModelRepo } from '../sim/sim-hub.js';
import { FAKE_VLLM_BIN } from './spawn-dev-agent.js';
import { createDevDirs, type DevDirs } from './dev-dirs.js';
import { buildDevUpSummary, type DevUpSummary } from './dev-up-summary.js';
import { describeGpuSource, findGpuSource, type GpuSource } from './find-gpu-source.js';
import { describeWaitingReplica } from './describe-waiting-replica.js';
import { findShardPorts } from './find-shard-ports.js';
import { watchReplicas } from './watch-replicas.js';

/** Discovery against nvidia-smi (or the fake) and a first Register; the agent's discovery timeout is 5 s per command. */
export const REGISTER_TIMEOUT_MS = 60_000;
/** A replica not placed by then never will be: the node has no free GPU that fits. */
export const PLACE_TIMEOUT_MS = 30_000;
/** From StartShard to the agent's first report: validation and a spawn. */
export const START_TIMEOUT_MS = 60_000;
/** Beyond the longest profile startup_timeout, so the control plane's own retry is seen first. */
export const READY_SLACK_MS = 30_000;

/** default: spinners on a terminal; simple: one line per step (pipes, CI); silent: nothing (--json). */
export type DevUpRenderer = 'default' | 'simple' | 'silent';

export interface RunDevUpOptions {
  /** Replicas of the generated sim deployment; ignored with `deploymentFile`. */
  replicas: number;
  engine: DevEngine;
  /** Run this deployment instead of the generated one. */
  deploymentFile?: string;
  /** The control plane's port on 127.0.0.1; 0 picks a free one. */
  port: number;
  /** Leave the temp directory (state, logs, configuration) behind. */
  keep: boolean;
  /** Level of the control plane's and the agent's log files. */
  logLevel: string;
  renderer: DevUpRenderer;
  /** Called once, when every replica is ready. */
  onReady: (summary: DevUpSummary) => void;
  /** One line per step of starting (plain renderer) and stopping, for a person watching (stderr). */
  onProgress: (line: string) => void;
  /** After ready: a replica that moved (new URL and curl line), a failure, a crash loop; onProgress when unset. */
  onUpdate?: (line: string) => void;
  /** nvidia-smi to look for real GPUs with (tests point it at something that fails). */
  nvidiaSmi?: string;
  /** --retry-backoff: the first wait before a failed replica is placed again (DevClusterOptions). */
  retryBackoffMs?: number;
}

export interface DevUpOutcome {
  /** Absent when stopped before everything was ready. */
  summary?: DevUpSummary;
  stop: DevStopReport;
}

/**
 * `llmgw dev up`: a control plane, one agent and its engines on this
 * machine, until SIGINT or SIGTERM; then everything is stopped and nothing
 * is left running. A second signal kills what is left at once and exits.
 * Throws (after stopping everything) when the cluster cannot come up or the
 * agent dies; the temp directory is then kept for its logs.
 */
export async function runDevUp(opts: RunDevUpOptions): Promise<DevUpOutcome> {
  let cluster: DevCluster | undefined;
  let dirs: DevDirs | undefined;
  let summary: DevUpSummary | undefined;
  let hub: FakeHub | undefined;
  const shutdown = onShutdownSignals(
    (sig) => opts.onProgress(`${sig}: stopping everything (again to kill at once)`),
    (sig) => {
      const killed = cluster?.killNow() ?? [];
      opts.onProgress(`${sig} again: killed the agent and ${killed.length} engine process(es); exiting`);
      if (!dirs) return;
      if (summary && !opts.keep) rmSync(dirs.root, { recursive: true, force: true });
      else opts.onProgress(`kept ${dirs.root} (state, logs, configuration)`);
    },
  );
  const { signal } = shutdown;
  try {
    const gpus = await findGpuSource({ signal, nvidiaSmi: opts.nvidiaSmi });
    // The vLLM double's args name a directory of the run's own: made first, removed again if the deployment is refused.
    const runDirs = createDevDirs();
    let deployment: Deployment;
    try {
      deployment = opts.deploymentFile ? loadDeployment(opts.deploymentFile) : generatedDeployment(opts, gpus, runDirs.gpuUsageDir);
      checkDeploymentFitsOneNode(deployment, gpus.gpuCount, opts.deploymentFile ?? 'the generated deployment');
    } catch (err) {
      rmSync(runDirs.root, { recursive: true, force: true });
      throw err;
    }
    // One HTTP port per shard; no leader ports, every replica is on one node.
    const shardPorts = await findShardPorts(deployment.replicas.length);

    dirs = runDirs;
    // Said before anything can go wrong: a start that hangs or fails is
    // exactly when the logs are needed, and their paths were only printed
    // once everything was ready.
    opts.onProgress(`temp dir ${dirs.root} (kept if dev up stops before every replica is ready, or anything fails)`);
    opts.onProgress(`logs: agent ${dirs.agentLog}, control plane ${dirs.controlPlaneLog}, engines ${shardLogDir(dirs.logDir)}/`);
    const deploymentPath = opts.deploymentFile ?? dirs.deployment;
    const fromHub = !opts.deploymentFile && devModelFromHub(opts.engine);
    if (!opts.deploymentFile) writeFileSync(dirs.deployment, devDeploymentYaml({ ...opts, gpuUsageDir: dirs.gpuUsageDir }));
    const logger = await createLogger({ level: opts.logLevel as 'info', name: 'control-plane', file: dirs.controlPlaneLog });
    if (fromHub) {
      // The vLLM double's model, served by a hub of our own: pulled into the node's store with no network.
      hub = new FakeHub();
      hub.repos.set(DEV_HUB_MODEL, devModelRepo(DEV_HUB_MODEL));
      await hub.start();
      opts.onProgress(`model hub ${hub.url} serving ${DEV_HUB_MODEL}; the agent's model store is ${dirs.modelsDir}`);
    }
    cluster = new DevCluster({ deployment, gpus, dirs, port: opts.port, shardPorts, logLevel: opts.logLevel, logger, ...(opts.retryBackoffMs !== undefined ? { retryBackoffMs: opts.retryBackoffMs } : {}), ...(hub ? { vllmDouble: { command: FAKE_VLLM_BIN, hubUrl: hub.url } } : {}) });

    let failed: unknown;
    // Failures after ready: the lines that reported them named logs in the temp dir, which must outlive dev up.
    const crashLooped = new Set<string>();
    const failedShards = new Set<string>();
    const watch = watchReplicas(cluster.controlPlane, {
      logDir: dirs.logDir,
      say: opts.onUpdate ?? opts.onProgress,
      onFailure: (f) => {
        failedShards.add(f.shardId);
        if (f.crashLooping) crashLooped.add(f.replicaId);
      },
    });
    try {
      await startTasks(cluster, deployment, gpus, dirs, opts, signal);
      cluster.markReady();
      summary = buildDevUpSummary({
        url: cluster.url as string,
        gpus,
        agentPid: cluster.agent?.pid ?? 0,
        nodeId: DEV_NODE_ID,
        replicas: cluster.controlPlane.replicas(),
        dirs,
        deploymentPath,
        ...(fromHub ? { warm: { modelsDir: dirs.modelsDir, model: DEV_HUB_MODEL } } : {}),
      });
      opts.onReady(summary);
      watch.printed(cluster.controlPlane.replicas());
      const agentExit = await untilAbortedOrExit(signal, cluster);
      if (agentExit) failed = new Error(`the agent exited on its own (${agentExit}); its log: ${dirs.agentLog}`);
    } catch (err) {
      // Ctrl-C while starting is a stop like any other, not a failure.
      if (!signal.aborted) failed = err;
    } finally {
      watch.stop();
    }
    const stop = await cluster.stop(opts.onProgress);
    // Removed only after a clean run that got to ready: stopped while
    // starting, the engine's log is the one thing that says why it hung; a
    // shard that failed after ready (a crash loop) had its log path printed,
    // and docs/local-cluster.md promises the directory is kept "when anything failed"
    // (new-operator walkthrough 2, row 12).
    if (failed !== undefined || opts.keep || summary === undefined || failedShards.size > 0) {
      const why = opts.keep
        ? '--keep'
        : failed !== undefined
          ? 'something failed'
          : summary === undefined
            ? 'stopped before every replica was ready'
            : crashLooped.size > 0
              ? `${[...crashLooped].join(', ')} crash-looped`
              : `shard(s) failed: ${[...failedShards].join(', ')}`;
      opts.onProgress(`kept ${dirs.root} (${why}): engine logs in ${shardLogDir(dirs.logDir)}/, agent log ${dirs.agentLog}, control plane log ${dirs.controlPlaneLog}`);
    } else {
      rmSync(dirs.root, { recursive: true, force: true });
      opts.onProgress(`removed ${dirs.root}`);
    }
    if (failed !== undefined) throw failed;
    return { summary, stop };
  } finally {
    await hub?.stop();
    shutdown.dispose();
  }
}

function generatedDeployment(opts: RunDevUpOptions, gpus: GpuSource, gpuUsageDir: string): Deployment {
  if (opts.replicas > gpus.gpuCount) {
    throw usageError(`--replicas ${opts.replicas}: each replica takes one GPU and this node has ${gpus.gpuCount}; use at most ${gpus.gpuCount}`);
  }
  return parseDeployment(devDeploymentYaml({ ...opts, gpuUsageDir }), 'the generated deployment');
}

/** Resolves with undefined on the first Ctrl-C, or with how the agent ended when it dies on its own first. */
async function untilAbortedOrExit(signal: AbortSignal, cluster: DevCluster): Promise<string | undefined> {
  if (signal.aborted) return undefined;
  const agent = cluster.agent;
  let onAbort = () => {};
  const aborted = new Promise<undefined>((resolve) => {
    onAbort = () => resolve(undefined);
    signal.addEventListener('abort', onAbort, { once: true });
  });
  try {
    const exited = agent ? agent.exited.then((e) => (e.signal ? `signal ${e.signal}` : `exit code ${e.exitCode}`)) : new Promise<string>(() => {});
    return await Promise.race([aborted, exited]);
  } finally {
    signal.removeEventListener('abort', onAbort);
  }
}

const shardsOf = (rs: ReplicaView[]) => rs.flatMap((r) => r.shards);

/** A replica not ready this long after placement began gets its phase and engine log printed. */
export const SLOW_REPLICA_MS = 2_000;
/** A replica already described is described again only when that changed, and not more often than this. */
export const SLOW_REPEAT_MS = 5_000;
const SLOW_POLL_MS = 500;

interface Step {
  title: string;
  /** Returns the title shown once done; `note` adds lines under the step. */
  run: (note: (lines: string[]) => void) => Promise<string>;
}

/**
 * Registering, placing, starting, ready: each a wait on what the control
 * plane has been told, so the steps a newcomer watches are the ones a
 * production node goes through. Progress goes to stderr; stdout carries
 * only the summary.
 */
async function startTasks(cluster: DevCluster, deployment: Deployment, gpus: GpuSource, dirs: DevDirs, opts: RunDevUpOptions, signal: AbortSignal): Promise<void> {
  const n = deployment.replicas.length;
  const readyTimeoutMs = Math.max(...deployment.replicas.map((r) => r.profile.startupTimeoutMs)) + READY_SLACK_MS;
  // One clock and one memory of what was said for the three waits on replicas: a replica is slow since placement began.
  const watch: WaitWatch = { startedAt: 0, said: new Map() };
  const watched = <T>(note: (lines: string[]) => void, wait: () => Promise<T>) => watchedWait(cluster, dirs, watch, note, signal, wait);
  const steps: Step[] = [
    { title: 'Starting the reference control plane', run: async () => `Control plane listening on ${await cluster.startControlPlane()}` },
    {
      title: `Registering the agent: ${describeGpuSource(gpus)}`,
      run: async () => {
        const agent = cluster.startAgent();
        const node = await cluster.waitForNode(signal, REGISTER_TIMEOUT_MS);
        return `Agent ${node.id} (pid ${agent.pid}) registered with ${node.inventory.gpuCount} GPUs (${gpus.kind === 'fake' ? 'fake' : 'real'})`;
      },
    },
    {
      title: `Placing ${n} replica(s)`,
      run: async (note) => {
        refuseUnplaceable(cluster, opts, n);
        watch.startedAt = Date.now();
        const rs = await watched(note, () =>
          cluster.waitForReplicas((r) => r.every((x) => x.phase !== 'pending'), 'placement', signal, PLACE_TIMEOUT_MS),
        );
        return `Placed ${rs.map((r) => `${r.id} on GPU ${shardsOf([r]).flatMap((s) => s.gpuIndices).join(',')}`).join(', ')}`;
      },
    },
    {
      title: 'Starting engines',
      run: async (note) => {
        const rs = await watched(note, () =>
          cluster.waitForReplicas(
            (r) => {
              const reported = cluster.reportedShards();
              return shardsOf(r).length > 0 && shardsOf(r).every((s) => reported.has(s.shardId));
            },
            'the agent to start the engines',
            signal,
            START_TIMEOUT_MS,
          ),
        );
        return `Started ${shardsOf(rs).length} engine(s): ${shardsOf(rs)
          .map((s) => s.shardId)
          .join(', ')}`;
      },
    },
    {
      title: 'Waiting for every replica to be ready',
      run: async (note) => {
        const rs = await watched(note, () =>
          cluster.waitForReplicas((r) => r.every((x) => x.phase === 'ready'), 'every replica to be ready', signal, readyTimeoutMs),
        );
        return `Ready: ${rs.map((r) => r.url).join(', ')}`;
      },
    },
  ];
  try {
    if (opts.renderer === 'default') await runWithSpinners(steps);
    else await runPlain(steps, opts.renderer === 'simple' ? opts.onProgress : () => {});
  } catch (err) {
    throw signal.aborted ? signal.reason : err;
  }
}

/**
 * Refuses at once a deployment the registered node cannot hold, by the
 * control plane's own placement rule (unhealthy GPUs and GPUs whose memory
 * no process accounts for are left out): with the one agent dev up runs,
 * such a replica would wait at "pending" until the placement timeout
 * (new-operator walkthrough 2, row 4). Exit 2 for --replicas, as a count
 * over the GPU total is; 78 for a deployment file.
 */
function refuseUnplaceable(cluster: DevCluster, opts: RunDevUpOptions, n: number): void {
  const stuck = cluster.controlPlane.unplaceable();
  if (!stuck) return;
  if (opts.deploymentFile) {
    throw configError(`replica ${stuck.replicaId} in ${opts.deploymentFile} cannot be placed on this node: ${stuck.reason}; change the deployment to fit`);
  }
  const fix = stuck.placedBefore > 0 ? `use at most ${stuck.placedBefore}` : 'free or fix a GPU first';
  throw usageError(`--replicas ${n}: this node can hold ${stuck.placedBefore} (replica ${stuck.replicaId} ${stuck.reason}); ${fix}`);
}

/** Pipes and CI logs: one line per finished step and per note, no spinner frames, no glyphs. */
async function runPlain(steps: Step[], say: (line: string) => void): Promise<void> {
  for (const step of steps) say(await step.run((lines) => lines.forEach(say)));
}

/** A terminal: listr2's spinners, notes shown under their step. */
async function runWithSpinners(steps: Step[]): Promise<void> {
  const tasks = new Listr(
    steps.map((step) => ({
      title: step.title,
      task: async (_: object, task: { title: string; output: string }) => {
        task.title = await step.run((lines) => {
          task.output = lines.join('\n');
        });
      },
      rendererOptions: { outputBar: Number.POSITIVE_INFINITY, persistentOutput: false },
    })),
    // Ctrl-C is onShutdownSignals', which stops the cluster in order.
    { ...progressListrOptions('default'), exitOnError: true },
  );
  await tasks.run({});
}

/**
 * Runs one wait while describing every replica that is still not ready
 * SLOW_REPLICA_MS after placement began: its phase and its engine's last log lines, again
 * whenever that changes. The wait goes on; this only explains it.
 */
interface WaitWatch {
  startedAt: number;
  said: Map<string, { text: string; at: number }>;
}

async function watchedWait<T>(
  cluster: DevCluster,
  dirs: DevDirs,
  { startedAt, said }: WaitWatch,
  note: (lines: string[]) => void,
  signal: AbortSignal,
  wait: () => Promise<T>,
): Promise<T> {
  const look = () => {
    const now = Date.now();
    if (now - startedAt < SLOW_REPLICA_MS || signal.aborted) return;
    for (const r of cluster.controlPlane.replicas()) {
      if (r.phase === 'ready') continue;
      const lines = describeWaitingReplica(r, dirs.logDir, now - startedAt);
      // The head line carries the waited seconds; compare what follows it and the phase.
      const text = [r.phase, ...r.shards.map((s) => s.stateName), r.lastError ?? '', ...lines.slice(1)].join('\n');
      const before = said.get(r.id);
      if (before && (before.text === text || now - before.at < SLOW_REPEAT_MS)) continue;
      said.set(r.id, { text, at: now });
      note(lines);
    }
  };
  const timer = setInterval(look, SLOW_POLL_MS);
  try {
    return await wait();
  } finally {
    clearInterval(timer);
  }
}
