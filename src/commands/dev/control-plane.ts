import { Flags } from '@oclif/core';
import { BaseCommand } from '../../cli/base-command.js';
import { DEFAULT_NODE_GRACE_MS, DEFAULT_PLACEMENT_DELAY_MS, DEFAULT_RETRY_BACKOFF_MS } from '../../control/control-plane.js';
import { loadDeployment } from '../../control/load-deployment.js';
import { DEFAULT_PORT_RANGE } from '../../control/port-pool.js';
import { serveControlPlane } from '../../control/serve-control-plane.js';
import { formatDuration, parseDuration } from '../../lib/duration.js';
import { usageError } from '../../lib/errors.js';
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

  static override flags = {
    listen: Flags.string({ summary: 'Address to listen on, HOST:PORT; port 0 picks a free one.', default: '127.0.0.1:8443' }),
    deployment: Flags.string({ char: 'd', summary: 'Deployment YAML (profiles and replicas); without it, nothing is placed.' }),
    'tls-cert': Flags.string({ summary: 'Server certificate (PEM); with --tls-key and --tls-ca, serve TLS and require client certificates.' }),
    'tls-key': Flags.string({ summary: 'Server private key (PEM).' }),
    'tls-ca': Flags.string({ summary: 'CA bundle (PEM) client certificates must be signed by.' }),
    'json-events': Flags.boolean({ summary: 'Also print every event (registrations, shard status, replicas ready) as one JSON line on stdout.' }),
    'node-grace': Flags.string({ summary: `How long a disconnected node's shards are kept before they are placed elsewhere [default: ${formatDuration(DEFAULT_NODE_GRACE_MS)}].` }),
    'retry-backoff': Flags.string({ summary: `Wait before placing a failed replica again [default: ${formatDuration(DEFAULT_RETRY_BACKOFF_MS)}].` }),
    'placement-delay': Flags.string({ summary: `Wait after start for nodes to report running shards before placing [default: ${formatDuration(DEFAULT_PLACEMENT_DELAY_MS)}].` }),
    'stop-on-exit': Flags.boolean({
      summary: 'On SIGINT/SIGTERM, stop every shard through its agent before exiting (the teardown of a local cluster; never in a fleet).',
    }),
    'port-range': Flags.string({ summary: `Ports handed to shards, FIRST-LAST [default: ${DEFAULT_PORT_RANGE.join('-')}].` }),
  };

  async run(): Promise<{ url: string }> {
    const { flags } = await this.parse(DevControlPlane);
    const listen = parseListen(flags.listen);
    const tlsFlags = [flags['tls-cert'], flags['tls-key'], flags['tls-ca']];
    if (tlsFlags.some((f) => f !== undefined) && !tlsFlags.every((f) => f !== undefined)) {
      throw usageError('--tls-cert, --tls-key and --tls-ca go together: mutual TLS needs all three');
    }
    const deployment = flags.deployment === undefined ? undefined : loadDeployment(flags.deployment);
    const logger = await createLogger({ level: flags['log-level'], name: 'control-plane' });
    const { signal } = onShutdownSignals();
    const write = (line: string) => process.stdout.write(`${line}\n`);
    return serveControlPlane({
      listen,
      signal,
      deployment,
      logger,
      ...(flags['tls-cert'] ? { tls: { cert: flags['tls-cert'], key: flags['tls-key'] as string, ca: flags['tls-ca'] as string } } : {}),
      ...optionalMs('node-grace', flags['node-grace'], 'nodeGraceMs'),
      ...optionalMs('retry-backoff', flags['retry-backoff'], 'retryBackoffMs'),
      ...optionalMs('placement-delay', flags['placement-delay'], 'placementDelayMs'),
      ...(flags['port-range'] ? { portRange: parsePortRange(flags['port-range']) } : {}),
      onListening: (url) => write(`listening on ${url}`),
      ...(flags['stop-on-exit'] ? { stopShardsOnExit: true, onProgress: (line: string) => process.stderr.write(`${line}\n`) } : {}),
      ...(flags['json-events'] ? { onEvent: (e: Record<string, unknown>) => write(JSON.stringify(e)) } : {}),
    });
  }
}

function parseListen(text: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d{1,5})$/.exec(text);
  const port = Number(m?.[3]);
  if (!m || port > 65535) throw usageError(`--listen ${JSON.stringify(text)} is not HOST:PORT; write it like 127.0.0.1:8443 or [::1]:0`);
  return { host: (m[1] ?? m[2]) as string, port };
}

function parsePortRange(text: string): [number, number] {
  const m = /^(\d{1,5})-(\d{1,5})$/.exec(text);
  const first = Number(m?.[1]);
  const last = Number(m?.[2]);
  if (!m || first < 1 || last > 65535 || first > last) throw usageError(`--port-range ${JSON.stringify(text)} is not FIRST-LAST; write it like 18000-18999`);
  return [first, last];
}

function optionalMs<K extends string>(flag: string, text: string | undefined, key: K): Partial<Record<K, number>> {
  if (text === undefined) return {};
  const ms = parseDuration(text);
  if (ms === undefined) throw usageError(`--${flag} ${JSON.stringify(text)} is not a duration; write it like 500ms, 5s or 2m`);
  return { [key]: ms } as Partial<Record<K, number>>;
}
