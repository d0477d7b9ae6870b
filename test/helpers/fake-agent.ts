import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { createClient } from '@connectrpc/connect';
import { createConnectTransport, createGrpcTransport } from '@connectrpc/connect-node';
import { createWritableIterable } from '@connectrpc/connect/protocol';
import { readFileSync } from 'node:fs';
import {
  type AgentMessage,
  AgentMessageSchema,
  AgentService,
  type ControlMessage,
  GpuSchema,
  InventorySchema,
  RegisterSchema,
  type RunningShard,
} from '../../src/gen/llmgw/v1/agent_pb.js';

export interface FakeAgentOptions {
  /** The control plane's URL (http:// for h2c, https:// with `tls`). */
  baseUrl: string;
  nodeId: string;
  /** Connect (default) or gRPC protocol, like the agent's `protocol` key. */
  protocol?: 'connect' | 'grpc';
  /** Healthy fixture GPUs in the inventory (default 2). */
  gpus?: number;
  mgmtAddr?: string;
  labels?: Record<string, string>;
  runningShards?: MessageInitShape<typeof RegisterSchema>['runningShards'];
  /** PEM file paths; `cert`/`key` may be omitted to connect without a client certificate. */
  tls?: { ca: string; cert?: string; key?: string };
  /** Send Register on connect (default true). */
  register?: boolean;
}

/**
 * An in-test agent: holds one AgentService.Connect stream like the real one
 * does and records every ControlMessage. It stands in for the agent process
 * only where the control plane is what is under test.
 */
export class FakeAgent {
  readonly nodeId: string;
  readonly received: ControlMessage[] = [];
  /** Settles when the response stream ends; rejects with the stream's error. */
  readonly done: Promise<void>;
  #out = createWritableIterable<AgentMessage>();
  #abort = new AbortController();
  #nextId = 0n;
  #listeners = new Set<() => void>();
  #ended = false;
  #error?: unknown;

  constructor(opts: FakeAgentOptions) {
    this.nodeId = opts.nodeId;
    const nodeOptions = opts.tls
      ? {
          ca: readFileSync(opts.tls.ca),
          ...(opts.tls.cert ? { cert: readFileSync(opts.tls.cert) } : {}),
          ...(opts.tls.key ? { key: readFileSync(opts.tls.key) } : {}),
        }
      : {};
    const transport =
      opts.protocol === 'grpc'
        ? createGrpcTransport({ baseUrl: opts.baseUrl, nodeOptions })
        : createConnectTransport({ baseUrl: opts.baseUrl, httpVersion: '2', nodeOptions });
    const client = createClient(AgentService, transport);
    const responses = client.connect(this.#out, { signal: this.#abort.signal });
    this.done = (async () => {
      try {
        for await (const m of responses) {
          this.received.push(m);
          for (const l of [...this.#listeners]) l();
        }
      } catch (err) {
        this.#error = err;
        throw err;
      } finally {
        this.#ended = true;
        for (const l of [...this.#listeners]) l();
      }
    })();
    // Observed through waitFor/done; never an unhandled rejection.
    this.done.catch(() => {});
    if (opts.register !== false) {
      this.send({
        case: 'register',
        value: create(RegisterSchema, {
          nodeId: opts.nodeId,
          hostname: `${opts.nodeId}.test`,
          mgmtAddr: opts.mgmtAddr ?? '127.0.0.1',
          version: 'test',
          labels: opts.labels ?? {},
          inventory: fixtureInventory(opts.gpus ?? 2),
          runningShards: opts.runningShards ?? [],
        }),
      });
    }
  }

  get ended(): boolean {
    return this.#ended;
  }

  /** Queues a message with the next message_id; returns that id. */
  send(msg: AgentMessage['msg']): bigint {
    this.#nextId += 1n;
    this.#out.write(create(AgentMessageSchema, { messageId: this.#nextId, msg })).catch(() => {});
    return this.#nextId;
  }

  /** Resolves with the first received message at index >= `from` that matches. */
  waitFor(pred: (m: ControlMessage) => boolean, opts: { from?: number; timeoutMs?: number } = {}): Promise<ControlMessage> {
    const timeoutMs = opts.timeoutMs ?? 15_000;
    let from = opts.from ?? 0;
    return new Promise((resolve, reject) => {
      const check = () => {
        for (; from < this.received.length; from++) {
          const m = this.received[from] as ControlMessage;
          if (pred(m)) {
            finish();
            resolve(m);
            return;
          }
        }
        if (this.#ended) {
          finish();
          reject(new Error(`stream of ${this.nodeId} ended before a matching message arrived${this.#error ? `: ${String(this.#error)}` : ''}`));
        }
      };
      const timer = setTimeout(() => {
        finish();
        reject(new Error(`${this.nodeId}: no matching control message within ${timeoutMs} ms; got ${this.received.map((m) => m.msg.case).join(', ')}`));
      }, timeoutMs);
      const finish = () => {
        clearTimeout(timer);
        this.#listeners.delete(check);
      };
      this.#listeners.add(check);
      check();
    });
  }

  /**
   * Resolves once the control plane has answered a message sent now (an
   * empty message, which it rejects with an Ack): streams are ordered, so
   * everything it sent before that has arrived. Lets a test assert that
   * something was NOT sent without sleeping.
   */
  async sync(timeoutMs = 15_000): Promise<void> {
    const from = this.received.length;
    const id = this.send({ case: undefined });
    await this.waitFor((m) => m.msg.case === 'ack' && m.msg.value.messageId === id, { from, timeoutMs });
  }

  /** Ends the request stream the way an agent does; resolves when the response stream has ended too. */
  async close(): Promise<void> {
    this.#out.close();
    const timer = setTimeout(() => this.#abort.abort(), 2_000);
    await this.done.catch(() => {});
    clearTimeout(timer);
  }

  /** Drops the connection without a goodbye, like a killed agent. */
  async kill(): Promise<void> {
    this.#abort.abort();
    await this.done.catch(() => {});
  }
}

export function fixtureInventory(gpus: number) {
  return create(InventorySchema, {
    gpus: Array.from({ length: gpus }, (_, i) =>
      create(GpuSchema, {
        index: i,
        uuid: `GPU-fake-${i}`,
        name: 'NVIDIA H100 80GB HBM3',
        computeCapability: '9.0',
        memoryTotalMb: 81559,
        healthy: true,
        numaNode: -1,
      }),
    ),
    driverVersion: '550.54.15',
    cudaVersion: '12.4',
  });
}

export function isStart(m: ControlMessage): boolean {
  return m.msg.case === 'start';
}

export function isStop(m: ControlMessage): boolean {
  return m.msg.case === 'stop';
}

/** A RunningShard init as an agent reports a shard it supervises. */
export type RunningShardInit = MessageInitShape<typeof RegisterSchema>['runningShards'] extends (infer T)[] | undefined ? T : never;
export type { RunningShard };
