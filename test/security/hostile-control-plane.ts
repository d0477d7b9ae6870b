import { create, type MessageInitShape } from '@bufbuild/protobuf';
import type { ConnectRouter } from '@connectrpc/connect';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import { createWritableIterable } from '@connectrpc/connect/protocol';
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { type AgentMessage, AgentService, type ControlMessage, ControlMessageSchema } from '../../src/gen/llmgw/v1/agent_pb.js';

/**
 * The review's evil-cp: a bare AgentService that sends whatever a test
 * scripts once Register arrives, and validates nothing. The agent must
 * defend itself; no reference control plane in between filters anything.
 */
export interface HostileControlPlane {
  url: string;
  /** Every AgentMessage received, across streams, in order. */
  received: AgentMessage[];
  /** Sends to the newest stream (after its Register). */
  send(msg: MessageInitShape<typeof ControlMessageSchema>['msg']): void;
  /** Resolves with the first message from now or earlier that matches. */
  waitFor(pred: (m: AgentMessage) => boolean, timeoutMs?: number): Promise<AgentMessage>;
  close(): Promise<void>;
}

export async function startHostileControlPlane(): Promise<HostileControlPlane> {
  const received: AgentMessage[] = [];
  const waiters = new Set<() => void>();
  let current: ReturnType<typeof createWritableIterable<ControlMessage>> | undefined;
  let registered: Promise<void> = new Promise(() => {});
  let onRegister = () => {};
  const resetRegister = () => {
    registered = new Promise((r) => {
      onRegister = r;
    });
  };
  resetRegister();
  let nextId = 1n;

  const routes = (router: ConnectRouter) => {
    router.service(AgentService, {
      connect: async function* (requests, ctx) {
        const out = createWritableIterable<ControlMessage>();
        current = out;
        resetRegister();
        void (async () => {
          try {
            for await (const m of requests) {
              received.push(m);
              if (m.msg.case === 'register') onRegister();
              for (const w of waiters) w();
            }
          } catch {
            // The agent went away; the test sees it through what it waits for.
          } finally {
            out.close();
          }
        })();
        ctx.signal.addEventListener('abort', () => out.close(), { once: true });
        yield* out;
      },
    });
  };
  const server = http2.createServer(connectNodeAdapter({ routes }));
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on('session', (s) => {
    sessions.add(s);
    s.once('close', () => sessions.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;

  return {
    url: `http://127.0.0.1:${port}`,
    received,
    send(msg) {
      void registered.then(() => current?.write(create(ControlMessageSchema, { messageId: nextId++, msg })));
    },
    waitFor(pred, timeoutMs = 30_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const hit = received.find(pred);
          if (!hit) return;
          waiters.delete(check);
          clearTimeout(timer);
          resolve(hit);
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`no matching message from the agent in ${timeoutMs} ms`));
        }, timeoutMs);
        waiters.add(check);
        check();
      });
    },
    async close() {
      for (const s of sessions) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
