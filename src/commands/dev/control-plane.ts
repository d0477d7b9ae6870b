import { Flags } from '@oclif/core';
import { BaseCommand } from '../../cli/base-command.js';
import { durationFlag } from '../../cli/duration-flags.js';
import { controlPlaneSettings } from '../../control/control-plane-flags.js';
import { DEFAULT_NODE_GRACE_MS, DEFAULT_PLACEMENT_DELAY_MS, DEFAULT_RETRY_BACKOFF_MS } from '../../control/control-plane.js';
import { loadDeployment } from '../../control/load-deployment.js';
import { DEFAULT_PORT_RANGE } from '../../control/port-pool.js';
import { serveControlPlane } from '../../control/serve-control-plane.js';
import { formatDuration } from '../../lib/duration.js';
import { createLogger } from '../../lib/logger.js';
import { onShutdownSignals } from '../../lib/on-shutdown-signals.js';

export default class DevControlPlane extends BaseCommand {
  static override summary = 'Run the reference control plane (local runs, demos and tests only; production runs the llmgw control plane).';

  static override description = `This is a reference control plane for local runs, demos and end-to-end tests.
It is NOT the production control plane: production runs the llmgw control
plane, a separate service that speaks the same contract.

It serves AgentService (Connect, gRPC and gRPC-web on one HTTP/2 port; h2c, or
TLS requiring client certificates with --tls-cert/--tls-key/--tls-ca), keeps a
registry of the agents that connect, and places the replicas of --deployment
on their free GPUs. Shards that nodes report running are adopted, never
restarted. Without --deployment it only records what agents send.

Prints "listening on URL" on stdout once listening (--listen 127.0.0.1:0 picks
a free port); logs go to stderr. SIGINT or SIGTERM closes every stream and
exits 0; with --stop-on-exit it first stops every shard through its agent and
waits for them to be reported stopped, so that Ctrl-C here, then on each
agent, leaves nothing running. Exits 78 on a bad deployment file.`;

  static override examples = [
    '<%= config.bin %> dev control-plane --listen 127.0.0.1:8443 --deployment examples/deployment.yaml',
    '<%= config.bin %> dev control-plane --listen 127.0.0.1:0 --deployment examples/deployment.yaml --json-events',
    '<%= config.bin %> dev control-plane --listen 0.0.0.0:8443 --deployment d.yaml --tls-cert server.pem --tls-key server.key --tls-ca ca.pem',
  ];

  // A server: an operator's `llmgw config` (output.json, color) must not change what it prints.
  static override honoursPreferences = false;

  static override flags = {
    listen: Flags.string({ summary: 'Address to listen on, HOST:PORT; port 0 picks a free one.', default: '127.0.0.1:8443' }),
    deployment: Flags.string({ char: 'd', summary: 'Deployment YAML (profiles and replicas); without it, nothing is placed.' }),
    'tls-cert': Flags.string({ summary: 'Server certificate (PEM); with --tls-key and --tls-ca, serve TLS and require client certificates.' }),
    'tls-key': Flags.string({ summary: 'Server private key (PEM).' }),
    'tls-ca': Flags.string({ summary: 'CA bundle (PEM) client certificates must be signed by.' }),
    'json-events': Flags.boolean({ summary: 'Also print every event (registrations, shard status, replicas ready) as one JSON line on stdout.' }),
    'node-grace': durationFlag({ summary: `How long a disconnected node's shards are kept before they are placed elsewhere [default: ${formatDuration(DEFAULT_NODE_GRACE_MS)}].` }),
    'retry-backoff': durationFlag({ summary: `Wait before placing a failed replica again [default: ${formatDuration(DEFAULT_RETRY_BACKOFF_MS)}].` }),
    'placement-delay': durationFlag({ summary: `Wait after start for nodes to report running shards before placing [default: ${formatDuration(DEFAULT_PLACEMENT_DELAY_MS)}].` }),
    'stop-on-exit': Flags.boolean({
      summary: 'On SIGINT/SIGTERM, stop every shard through its agent before exiting (the teardown of a local cluster; never in a fleet).',
    }),
    'port-range': Flags.string({ summary: `Ports handed to shards, FIRST-LAST [default: ${DEFAULT_PORT_RANGE.join('-')}].` }),
  };

  async run(): Promise<{ url: string }> {
    const { flags } = await this.parse(DevControlPlane);
    const settings = controlPlaneSettings({
      listen: flags.listen,
      tlsCert: flags['tls-cert'],
      tlsKey: flags['tls-key'],
      tlsCa: flags['tls-ca'],
      nodeGraceMs: flags['node-grace'],
      retryBackoffMs: flags['retry-backoff'],
      placementDelayMs: flags['placement-delay'],
      portRange: flags['port-range'],
    });
    const deployment = flags.deployment === undefined ? undefined : loadDeployment(flags.deployment);
    const logger = await createLogger({ level: flags['log-level'], name: 'control-plane' });
    const { signal } = onShutdownSignals();
    const write = (line: string) => process.stdout.write(`${line}\n`);
    return serveControlPlane({
      ...settings,
      signal,
      deployment,
      logger,
      onListening: (url) => write(`listening on ${url}`),
      ...(flags['stop-on-exit'] ? { stopShardsOnExit: true, onProgress: (line: string) => process.stderr.write(`${line}\n`) } : {}),
      ...(flags['json-events'] ? { onEvent: (e: Record<string, unknown>) => write(JSON.stringify(e)) } : {}),
    });
  }
}
