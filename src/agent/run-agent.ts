import { askWithTls } from './gang/ask-peer.js';
import { KnownAnswerBook } from './supervisor/probes/known-answer-book.js';
import { firstToGo } from './gang/first-to-go.js';
import { GangWatch } from './gang/gang-watch.js';
import { serveGangEndpoint } from './gang/gang-endpoint.js';
import { readGangTls } from './gang/gang-tls.js';
import { listenFdNamed, takeListenFds } from '../lib/systemd/listen-fds.js';
import { statSync } from 'node:fs';
import type { Server } from 'node:net';
import { dirname, join } from 'node:path';
import { errorMessage } from '../lib/errors.js';
import { makeTrustedDirectory } from '../lib/files/check-directory-trust.js';
import { LOG_DIR_MODE } from '../lib/files/log-file-modes.js';
import { SOCKET_DIR_MODE } from './admin/prepare-socket-dir.js';
import { assertTrustedStore } from '../models/store-trust.js';
import { findGroup } from '../lib/find-group.js';
import type { Logger } from '../lib/logger.js';
import { onShutdownSignals } from '../lib/on-shutdown-signals.js';
import { sdNotify, startWatchdog } from '../lib/systemd-notify.js';
import { AdminServer } from './admin/admin-server.js';
import { Agent } from './agent.js';
import { lockStateDirectory } from './lock-state-directory.js';
import type { AgentMetrics } from './metrics/agent-metrics.js';
import { agentMetricsSources } from './metrics/agent-metrics-sources.js';
import { resolveMgmtAddr } from '../lib/node-identity.js';
import type { AgentConfig } from './config/agent-config.js';
import { discover } from './discovery/discover.js';
import { GpuMemorySampler, MIN_GPU_MEMORY_INTERVAL_MS } from './health/gpu-memory-sampler.js';
import { logGpuSource, openGpuSource } from './discovery/open-gpu-source.js';
import { logEngineAccounts } from './engines/engine-account.js';
import { EngineRegistry } from './engines/engine-registry.js';
import { shardBoundPorts } from './engines/shard-bound-ports.js';
import type { StartShard } from '../gen/llmgw/v1/agent_pb.js';
import { Supervisor } from './supervisor/supervisor.js';
import { engineUidsFor } from '../lib/process/process-table.js';

/** FileDescriptorName= of the gang socket in packaging/llmgw-gang.socket. */
const GANG_SOCKET_NAME = 'gang';

export interface RunAgentOptions {
  config: AgentConfig;
  version: string;
  logger: Logger;
}

/**
 * Assembles the agent from its parts and runs it until SIGTERM or SIGINT.
 * Resolves when the stream is closed; every engine is still running then.
 */
export async function runAgent({ config: c, version, logger }: RunAgentOptions): Promise<void> {
  // First, before any child is spawned: the variables leave the environment engines inherit (takeListenFds).
  const gangFd = listenFdNamed(takeListenFds(), GANG_SOCKET_NAME);
  if (gangFd && c.gangAddr === '') logger.warn({ fd: gangFd.fd }, 'systemd passed a gang socket (llmgw-gang.socket) and gang_addr is unset: the socket is not used; set gang_addr to its address, or disable the socket unit');
  // Before anything is read from or written to them (exit 78, one line); what is missing the agent makes
  // itself now, so that no local user makes it first (security review 4, F3).
  makeTrustedDirectory(c.supervisor.stateDir, 'supervisor.state_dir', 0o700);
  makeTrustedDirectory(c.supervisor.logDir, 'supervisor.log_dir', LOG_DIR_MODE);
  makeTrustedDirectory(dirname(c.admin.socket), 'admin.socket', SOCKET_DIR_MODE);
  if (c.models.cacheDir !== '') assertTrustedStore(c.models.cacheDir, undefined, 0o755);
  warnIfTokenReadable(c.models.hub.tokenFile, logger);
  const shutdown = onShutdownSignals((sig) => logger.info({ signal: sig }, 'stopping; engines keep running'));
  // An unknown group is the admin server's configuration error, reported when it listens.
  const logGid = c.admin.group === '' ? undefined : findGroup({ name: c.admin.group })?.gid;
  // Each profile's own account too (profile_users): its engines are the agent's, found by uid at adoption.
  const engineUids = engineUidsFor(Object.values(c.engines).flatMap((e) => [e?.user, ...Object.values(e?.profileUsers ?? {})]));
  // The engines' sleep APIs reach the supervisor from here, the one place that knows engines by name;
  // by the engine a shard was launched with, enabled now or not (an adopted shard asleep must wake).
  // The ports an engine binds beyond its http_port (SGLang's DP attention) come from its args, the operator's extra_args among them.
  const boundPorts = (spec: StartShard) => shardBoundPorts(spec, c.engines[spec.profile?.engine as keyof typeof c.engines]?.extraArgs);
  // A gang rank whose engine ended asks its peers who went first, with the gang endpoint's TLS (issue 47).
  const askGang = askWithTls(() => readGangTls(c.tls));
  const supervisor = new Supervisor({ config: c.supervisor, logger, logGid, engineUids, boundPorts, firstToGo: (s, at) => firstToGo(askGang, s, at), ...(c.models.cacheDir !== '' ? { knownAnswers: new KnownAnswerBook(join(c.supervisor.stateDir, 'known-answers.json')) } : {}) });
  // One NVML for the agent's life (discovery, memory readings, the health
  // watch): initialising it walks every GPU, far dearer than a reading.
  const gpuSource = openGpuSource({ preferNvml: c.discovery.preferNvml, nvmlLibrary: c.discovery.nvmlLibrary });
  const nvml = gpuSource.kind === 'nvml' ? gpuSource.nvml : undefined;
  const engines = new EngineRegistry({
    engines: c.engines,
    mgmtInterface: c.mgmtInterface,
    stopGraceMs: c.supervisor.stopGraceMs,
    mgmtAddr: resolveMgmtAddr(c.mgmtAddr, c.mgmtInterface),
    // Engines get the node's model store as their caches (issue 30); '' leaves them as before.
    modelsCacheDir: c.models.cacheDir,
    modelsHubEndpoint: c.models.hub?.endpoint,
  });
  // A reading per heartbeat, but not more than one a second: faster heartbeats
  // (tests, benchmarks) would only make nvidia-smi query NVML for nothing.
  const sampler = new GpuMemorySampler({
    nvidiaSmi: c.discovery.nvidiaSmi,
    intervalMs: Math.max(c.heartbeatIntervalMs, MIN_GPU_MEMORY_INTERVAL_MS),
    timeoutMs: c.discovery.timeoutMs,
    nvml,
    logger,
  });
  // prom-client is loaded only when metrics are asked for.
  const metrics: AgentMetrics | undefined = c.metricsAddr ? new (await import('./metrics/agent-metrics.js')).AgentMetrics() : undefined;
  let gangEndpoint = '';
  const agent = new Agent({
    config: c,
    version,
    gangEndpoint: () => gangEndpoint,
    logger,
    supervisor,
    engines,
    sampler,
    metrics,
    nvml,
    discover: (signal) =>
      discover({
        // NVML failed once and was said once (logGpuSource): rescans do not
        // load it again, warning again each time, for the same answer.
        preferNvml: nvml !== undefined,
        nvmlLibrary: c.discovery.nvmlLibrary,
        nvml,
        nvidiaSmi: c.discovery.nvidiaSmi,
        sysfsRoot: c.discovery.sysfsRoot,
        timeoutMs: c.discovery.timeoutMs,
        fabrics: c.fabrics,
        signal,
        logger,
      }),
  });

  const servers: Server[] = [];
  let admin: AdminServer | undefined;
  let stopWatchdog = () => {};
  let gangWatch: GangWatch | undefined;
  let unlock = () => {};
  try {
    // First of all, before any engine is adopted or killed: a second agent
    // started by mistake finds the first one holding the state directory (or
    // answering on the socket) and exits, instead of fighting it over the
    // same engines. Listening before the first connection attempt also makes
    // READY=1 mean "ctl works".
    unlock = await lockStateDirectory(c.supervisor.stateDir, logger);
    // From SIGTERM on, the socket refuses every change (one line, exit 69) and still answers reads: what the
    // agent's writers would take after they close is held in memory only, and lost at the restart.
    admin = await AdminServer.listen({ socketPath: c.admin.socket, group: c.admin.group, readGroup: c.admin.readGroup, backend: agent.admin, logger, stopping: shutdown.signal });
    // Said once this agent is the one that runs (a second agent refused above
    // says only why), and at start, not at the first launch an operator may
    // look for hours later.
    logGpuSource(logger, gpuSource);
    logEngineAccounts(logger, agent.engineAccounts());
    await supervisor.launcher();
    // Multi-node ranks (issue 40): the endpoint their peers ask, then the watch of their peers.
    if (c.gangAddr !== '') {
      const gang = await serveGangEndpoint({
        addr: c.gangAddr,
        nodeId: c.nodeId,
        shards: () => supervisor.list(),
        tls: () => readGangTls(c.tls),
        log: logger,
        ...(gangFd ? { listenFd: gangFd.fd } : {}),
        // What the agent saw of its port, for `ctl events` beside the log line (issue 48 acceptance).
        onPortHeld: (message, heldBy) => agent.events.record({ kind: 'node', message, fields: { condition: 'GangPortHeld', active: 'true', ...(heldBy ? { uid: String(heldBy.uid) } : {}) } }),
        onPortTaken: (message) => agent.events.record({ kind: 'node', message, fields: { condition: 'GangPortHeld', active: 'false' } }),
      });
      servers.push(gang.server);
      gangEndpoint = gang.endpoint;
    }
    gangWatch = new GangWatch({ nodeId: c.nodeId, shards: () => supervisor.listGangRanks(), mark: (id, f) => supervisor.gangChanged(id, f), log: logger, tls: () => readGangTls(c.tls), agentGraceMs: c.gangAgentGraceMs });
    // Parked while no multi-node rank runs here; woken by any change of one.
    const watch = gangWatch;
    supervisor.react({
      name: 'gang watch woken',
      on: (t) => {
        if (t.shard.spec.nnodes > 1) watch.poke();
      },
    });
    gangWatch.start();
    if (metrics) {
      metrics.observe(agentMetricsSources({ agent, supervisor, admin, node: c.nodeId, version, foreignMemoryShare: c.discovery.foreignMemoryShare }));
      servers.push(await metrics.serve(c.metricsAddr));
    }
    logger.info({ node: c.nodeId, server: c.server, protocol: c.protocol, version }, 'agent starting');
    await agent.run(shutdown.signal, {
      onFirstAttempt: () => {
        void sdNotify('READY=1');
        stopWatchdog = startWatchdog(() => agent.connectionStatus().phase !== 'stopped');
      },
    });
  } finally {
    stopWatchdog();
    gangWatch?.close();
    // Before the supervisor closes, not after: no admin call may be answered once the shards' state files take no
    // more writes. A `ctl drain` that came in between was told DRAINING and lost at the restart. Bounded
    // (CLOSE_GRACE_MS): SIGTERM must still end the agent within a second. Also when agent.run failed without a
    // SIGTERM: close() refuses writes as the stop signal does.
    await admin?.close();
    // The agent's scope only: timers and probes stop, engines are not touched. Its last state file writes end below.
    const supervisorClosed = supervisor.close();
    for (const s of servers) s.close();
    // After agent.run: the health watch has no NVML wait pending by then.
    nvml?.close();
    // The process exits right after: a state file write still in flight would be cut off.
    await supervisorClosed;
    unlock();
    shutdown.dispose();
    void sdNotify('STOPPING=1').catch((err: unknown) => logger.debug({ err: errorMessage(err) }, 'sd_notify'));
    // An agent that never got its socket never started: its one line is the error.
    if (admin) logger.info('agent stopped');
  }
}

/** The hub token is a credential: said once at start when users other than its owner may read it (security review 3, S4). */
function warnIfTokenReadable(tokenFile: string, logger: Logger): void {
  if (tokenFile === '') return;
  let mode: number;
  try {
    mode = statSync(tokenFile).mode & 0o777;
  } catch {
    return; // unreadable: each pull says so, as a config error
  }
  if ((mode & 0o077) !== 0) {
    logger.warn({ file: tokenFile, mode: mode.toString(8) }, 'models.hub.token_file may be read by users other than its owner; chmod 0600 it');
  }
}
