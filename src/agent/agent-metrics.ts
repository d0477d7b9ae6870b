import { createServer, type Server } from 'node:http';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { ShardState } from '../gen/llmgw/v1/agent_pb.js';
import { failure } from '../lib/errors.js';

/** The agent's Prometheus metrics; served only when metrics_addr is set. */
export class AgentMetrics {
  readonly registry = new Registry();
  readonly connected = new Gauge({ name: 'llmgw_agent_connected', help: '1 while a session with the control plane is established.', registers: [this.registry] });
  readonly reconnects = new Counter({ name: 'llmgw_agent_reconnects_total', help: 'Sessions with the control plane that ended and were retried.', registers: [this.registry] });
  readonly messagesSent = new Counter({ name: 'llmgw_agent_messages_sent_total', help: 'Messages queued to the control plane, by type.', labelNames: ['type'], registers: [this.registry] });
  readonly messagesReceived = new Counter({ name: 'llmgw_agent_messages_received_total', help: 'Messages received from the control plane, by type.', labelNames: ['type'], registers: [this.registry] });
  readonly engineExits = new Counter({ name: 'llmgw_agent_engine_exits_total', help: 'Engines that ended on their own, by the state reported.', labelNames: ['state'], registers: [this.registry] });
  readonly heartbeatSendSeconds = new Histogram({
    name: 'llmgw_agent_heartbeat_send_seconds',
    help: 'Time for the stream to take a heartbeat once it is written to it.',
    buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5],
    registers: [this.registry],
  });
  readonly gpuMemoryUsed = new Gauge({ name: 'llmgw_gpu_memory_used_mb', help: 'GPU memory used, from the last reading.', labelNames: ['gpu'], registers: [this.registry] });

  /** Shards by state, read when scraped. */
  trackShards(list: () => { state: ShardState }[]): void {
    const registry = this.registry;
    new Gauge({
      name: 'llmgw_agent_shards',
      help: 'Supervised shards by state.',
      labelNames: ['state'],
      registers: [registry],
      collect() {
        this.reset();
        for (const s of list()) this.inc({ state: ShardState[s.state] ?? String(s.state) });
      },
    });
  }

  /** Serves GET /metrics on host:port. */
  async serve(addr: string): Promise<Server> {
    const i = addr.lastIndexOf(':');
    const host = i > 0 ? addr.slice(0, i).replace(/^\[|\]$/g, '') : '127.0.0.1';
    const port = Number(addr.slice(i + 1));
    if (!Number.isInteger(port) || port < 0 || port > 65535) throw failure(`metrics_addr ${JSON.stringify(addr)} is not host:port`);
    const server = createServer((req, res) => {
      if (req.url !== '/metrics') {
        res.writeHead(404).end();
        return;
      }
      this.registry
        .metrics()
        .then((text) => res.writeHead(200, { 'content-type': this.registry.contentType }).end(text))
        .catch(() => res.writeHead(500).end());
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', (err) => reject(failure(`cannot serve metrics on ${addr}: ${err.message}`, { cause: err })));
      server.listen(port, host, resolve);
    });
    return server;
  }
}
