import { stateName } from '../../lib/shard-states.js';
import type { Server } from 'node:http';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { AdapterStatus, GpuEvent, ModelWarmth } from '../../gen/llmgw/v1/agent_pb.js';
import type { ConnectionPhase, ConnectionStatus } from '../connection/connection-state.js';
import type { Outbox } from '../connection/outbox.js';
import { GpuMetrics, type GpuMetricsView } from './gpu-metrics.js';
import { serveMetrics } from './metrics-server.js';
import { type NodeConditionView, registerNodeConditionMetrics } from './node-condition-metrics.js';
import { registerWarmthMetrics } from './warmth-metrics.js';
import { registerAdapterMetrics } from './adapter-metrics.js';
import { ShardMetrics, type ShardMetricsSources } from './shard-metrics.js';

/** Every phase of the control-plane stream, the values of llmgw_agent_stream_state's `state` label. */
const PHASES: readonly ConnectionPhase[] = ['starting', 'connecting', 'connected', 'retrying', 'stopping', 'stopped'];

/** What the scrape-time families read: the agent's own state, never a copy kept up to date beside it. */
export interface AgentMetricsSources extends ShardMetricsSources {
  node: string;
  version: string;
  gpus(): GpuMetricsView[];
  connection(): ConnectionStatus;
  /** Admin-socket connections open now, and refused (over the caps) since start. */
  adminConnections(): { open: number; refused: number };
  /** The node's conditions (DiskPressure, Cordoned), for llmgw_node_condition; none when absent. */
  conditions?(): readonly NodeConditionView[];
  /** Inventory.warmth, for llmgw_model_time_to_ready_seconds; none when absent. */
  warmth?(): readonly ModelWarmth[];
  /** Each shard's LoRA adapters, for llmgw_adapter_*; none when absent. */
  adapters?(): readonly { shardId: string; adapters: readonly AdapterStatus[] }[];
}

/**
 * The agent's Prometheus metrics; served only when metrics_addr is set.
 * Names follow Prometheus's rules (base units, `_total` counters, `_info`
 * for labels worth joining on, state sets for states) and GPU series carry
 * dcgm-exporter's labels (GPU_LABELS). docs/metrics-alerts.md lists them all (test/docs/doc-coverage.test.ts holds it to them).
 */
export class AgentMetrics {
  readonly registry = new Registry();
  readonly connected = new Gauge({ name: 'llmgw_agent_connected', help: '1 while a session with the control plane is established.', registers: [this.registry] });
  readonly reconnects = new Counter({ name: 'llmgw_agent_reconnects_total', help: 'Sessions with the control plane that ended and were retried.', registers: [this.registry] });
  readonly messagesSent = new Counter({ name: 'llmgw_agent_messages_sent_total', help: 'Messages queued to the control plane, by type.', labelNames: ['type'], registers: [this.registry] });
  readonly messagesReceived = new Counter({ name: 'llmgw_agent_messages_received_total', help: 'Messages received from the control plane, by type.', labelNames: ['type'], registers: [this.registry] });
  readonly engineExits = AgentMetrics.bornAtZero(
    new Counter({ name: 'llmgw_agent_engine_exits_total', help: 'Engines that ended on their own, by the state reported.', labelNames: ['state'], registers: [this.registry] }),
  );

  /**
   * Each series there, at 0, before the first exit (walkthrough 3, item 2):
   * born at 1 with the first death, `increase()` never saw it, and the
   * README's alert on it stayed green while engines died.
   */
  private static bornAtZero(c: Counter<'state'>): Counter<'state'> {
    for (const state of ['FAILED', 'EXITED']) c.inc({ state }, 0);
    return c;
  }
  readonly heartbeatSendSeconds = new Histogram({
    name: 'llmgw_agent_heartbeat_send_seconds',
    help: 'Time for the stream to take a heartbeat once it is written to it.',
    buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5],
    registers: [this.registry],
  });
  private outbox: Outbox | undefined;
  private gpu: GpuMetrics | undefined;
  private sources: AgentMetricsSources | undefined;

  /**
   * Registers the families read when scraped: build info, stream state,
   * outbox, admin connections, every GPU and shard, and prom-client's
   * process and Node runtime collectors (process_*, nodejs_*, unprefixed so
   * that the usual dashboards read them).
   */
  observe(src: AgentMetricsSources): void {
    this.sources = src;
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    // Gauges named as counters, which `promtool check metrics` refuses (walkthrough 4, O6); each is
    // the sum of its per-type family beside it: sum(nodejs_active_handles) is nodejs_active_handles_total.
    for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total']) this.registry.removeSingleMetric(name);
    new Gauge({ name: 'llmgw_build_info', help: "The agent's version and node id; always 1.", labelNames: ['version', 'node'], registers }).set(
      { version: src.version, node: src.node },
      1,
    );
    new Gauge({
      name: 'llmgw_agent_stream_state',
      help: "The control-plane stream's phase as a state set: 1 for the phase it is in, 0 for the others.",
      labelNames: ['state'],
      registers,
      collect() {
        const phase = src.connection().phase;
        for (const p of PHASES) this.set({ state: p }, p === phase ? 1 : 0);
      },
    });
    const self = this;
    new Gauge({
      name: 'llmgw_agent_outbox_messages',
      help: 'Messages waiting for the control-plane stream to take them (the one being written included); 0 without a session.',
      registers,
      collect() {
        this.set(self.outbox?.pending ?? 0);
      },
    });
    new Gauge({
      name: 'llmgw_agent_admin_connections',
      help: 'Connections open on the admin socket (ctl).',
      registers,
      collect() {
        this.set(src.adminConnections().open);
      },
    });
    new Counter({
      name: 'llmgw_agent_admin_connections_refused_total',
      help: 'Admin-socket connections refused because too many were open.',
      registers,
      collect() {
        this.reset();
        this.inc(src.adminConnections().refused);
      },
    });
    new Gauge({
      name: 'llmgw_agent_shards',
      help: 'Supervised shards by state.',
      labelNames: ['state'],
      registers,
      collect() {
        this.reset();
        for (const s of src.shards()) this.inc({ state: stateName(s.state) });
      },
    });
    this.gpu = new GpuMetrics(this.registry, () => src.gpus());
    new ShardMetrics(this.registry, src);
    new Gauge({
      name: 'llmgw_shard_gpu_info',
      help: "1 for each GPU a shard runs on, with dcgm-exporter's GPU labels: what joins a TP>1 shard to its GPUs' series.",
      labelNames: ['shard', 'replica', 'gpu', 'UUID', 'pci_bus_id'],
      registers,
      collect() {
        this.reset();
        const gpus = new Map(src.gpus().map((g) => [g.index, g]));
        for (const s of src.shards()) {
          for (const index of s.spec.gpuIndices) {
            const g = gpus.get(index);
            this.set({ shard: s.shardId, replica: s.replicaId, gpu: String(index), UUID: g?.uuid ?? '', pci_bus_id: g?.pciBusId ?? '' }, 1);
          }
        }
      },
    });
    registerNodeConditionMetrics(this.registry, () => src.conditions?.() ?? []);
    registerWarmthMetrics(this.registry, () => src.warmth?.() ?? []);
    registerAdapterMetrics(this.registry, () => src.adapters?.() ?? []);
  }

  /** The current session's outbox (undefined between sessions), whose depth llmgw_agent_outbox_messages reads. */
  followOutbox(outbox: Outbox | undefined): void {
    this.outbox = outbox;
  }

  /** One event of the GPU health watch, for llmgw_gpu_events_total. */
  countGpuEvent(e: GpuEvent): void {
    this.gpu?.count(e);
  }

  /** Serves /metrics, /healthz and /readyz on host:port (metrics-server.ts). */
  serve(addr: string): Promise<Server> {
    return serveMetrics(addr, {
      registry: this.registry,
      notReady: () => {
        const c = this.sources?.connection();
        if (!c) return 'starting';
        if (c.phase === 'connected') return undefined;
        return `not registered with the control plane (${c.phase}${c.lastError ? `: ${c.lastError}` : ''})`;
      },
    });
  }
}
