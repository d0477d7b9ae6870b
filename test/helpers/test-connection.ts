import { create } from '@bufbuild/protobuf';
import { onTestFinished } from 'vitest';
import { ControlPlaneConnection, type ControlPlaneConnectionOptions } from '../../src/agent/connection/control-plane-connection.js';
import type { Outbox } from '../../src/agent/connection/outbox.js';
import { buildHeartbeat, buildRegister, describeNode } from '../../src/agent/connection/register-message.js';
import { InventorySchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { captureLogger } from './capture-logger.js';

/** What a connection test sets: the server, and any of the rest of the connection's config (no TLS, 200 ms heartbeat otherwise). */
export type TestConnectionConfig = { server: string } & Partial<Omit<ControlPlaneConnectionOptions['config'], 'server'>>;

/**
 * A ControlPlaneConnection of an empty node to `config.server`, running
 * until the test ends (stopped and awaited then, failed or not), its log
 * captured: what a connection test needs of an agent and no more.
 * `onOpen` is given each session's outbox, for a test that sends on it.
 */
export function runTestConnection(nodeId: string, config: TestConnectionConfig, onOpen: (outbox: Outbox) => void = () => {}) {
  const node = describeNode({ nodeId, hostname: 'h', mgmtAddr: '127.0.0.1', mgmtInterface: 'lo', labels: {}, fabrics: [] }, 'test');
  const inventory = create(InventorySchema, {});
  const { logger, records } = captureLogger();
  const connection = new ControlPlaneConnection({
    config: { protocol: 'connect', tls: { cert: '', key: '', ca: '', expiryWarningMs: 0 }, heartbeatIntervalMs: 200, registerTimeoutMs: 0, reconnectBaseMs: 50, reconnectMaxMs: 400, ...config },
    logger,
    session: {
      register: () => buildRegister(node, inventory, []),
      heartbeat: () => buildHeartbeat(node.nodeId, [], inventory),
      onOpen,
      onClosed: () => {},
      onControlMessage: () => {},
    },
  });
  const shutdown = new AbortController();
  const running = connection.run(shutdown.signal);
  onTestFinished(async () => {
    shutdown.abort();
    await running;
  });
  return { connection, records };
}
