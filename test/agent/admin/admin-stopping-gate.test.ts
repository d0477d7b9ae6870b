import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { AdminServer } from '../../../src/agent/admin/admin-server.js';
import { READ_METHODS } from '../../../src/lib/admin-read-methods.js';
import { AdminService } from '../../../src/gen/llmgw/v1/admin_pb.js';
import { callUnaryJson } from '../../../src/ctl/call-unary-json.js';
import { ctlStatus } from '../../../src/ctl/ctl-status.js';
import { openAdminClient } from '../../../src/ctl/open-admin-client.js';
import { LlmgwError } from '../../../src/lib/errors.js';
import { type AgentDirs, agentDirs } from '../../helpers/agent-process.js';
import { captureLogger } from '../../helpers/capture-logger.js';
import { createInProcessAgent } from '../../helpers/in-process-agent.js';
import { until } from '../../helpers/engine-processes.js';

/*
 * The admin socket while the agent stops (admin-stopping-gate.ts): every
 * write refused in one line before its handler runs, reads answered. The
 * end-to-end case, with a real agent's SIGTERM and restart, is
 * test/agent/run-agent-stopping-writes.test.ts.
 */

/** Each write with a request its schema takes; the gate must answer before any handler reads it. */
const WRITES: Record<string, object> = {
  Adopt: {},
  Cordon: { cordon: false },
  ClearGpuFault: { gpuIndex: 0, reason: 'asked while stopping' },
  Sleep: { shardId: 's1', level: 1 },
  Wake: { shardId: 's1' },
  ChangeAdapters: { shardId: 's1', unload: 'a' },
};

function newDirs(): AgentDirs {
  const root = mkdtempSync(join(tmpdir(), 'llmgw-admin-stopping-'));
  onTestFinished(() => rmSync(root, { recursive: true, force: true }));
  return agentDirs(root);
}

/** What came back on a connection after `request` was written: the bytes until it closed, or the error that cut it. */
function exchangeOn(socket: ReturnType<typeof connect>, request: string): Promise<string> {
  return new Promise((resolve) => {
    let got = '';
    socket.on('data', (b) => {
      got += b.toString();
    });
    socket.once('close', () => resolve(got));
    socket.once('error', (err) => resolve(`cut: ${err.message}`));
    socket.write(request);
  });
}

async function stoppableAdmin() {
  const dirs = newDirs();
  const { agent, close } = createInProcessAgent(dirs);
  onTestFinished(close);
  const stopping = new AbortController();
  const { logger, records } = captureLogger('info');
  const admin = await AdminServer.listen({ socketPath: dirs.socket, group: '', backend: agent.admin, logger, stopping: stopping.signal });
  onTestFinished(() => admin.close());
  return { dirs, agent, stop: () => stopping.abort(new Error('received SIGTERM')), records };
}

async function refusal(p: Promise<unknown>): Promise<{ exitCode: number; message: string }> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(LlmgwError);
  return { exitCode: (err as LlmgwError).exitCode, message: (err as LlmgwError).message };
}

describe('the admin socket while the agent stops', () => {
  it('names every AdminService method either a read or one of the writes refused here', () => {
    // A method added later is a write unless READ_METHODS says otherwise; this list must follow it.
    const methods = AdminService.methods.map((m) => m.name).sort();
    expect(methods).toEqual([...READ_METHODS, ...Object.keys(WRITES), 'Drain'].sort());
  });

  it('refuses every write in one line with exit 69 and changes nothing, while Status and Adapters still answer', async () => {
    const a = await stoppableAdmin();
    // The look-alike first: a cordon before the stop is done, on disk.
    await callUnaryJson(a.dirs.socket, 'Cordon', { cordon: true, reason: 'before the stop' });
    const cordonFile = join(a.dirs.stateDir, 'cordon.json');
    expect(existsSync(cordonFile)).toBe(true);

    const eventsBefore = a.agent.events.list().length;
    a.stop();
    expect((await ctlStatus(a.dirs.socket)).nodeId).toBe('node-in-process');
    // A read that fails, fails for its own reason (an unknown shard), not the stop's.
    expect((await refusal(callUnaryJson(a.dirs.socket, 'Adapters', { shardId: 's1' }))).message).not.toMatch(/stopping/);
    for (const [method, request] of Object.entries(WRITES)) {
      expect(await refusal(callUnaryJson(a.dirs.socket, method, request)), method).toEqual({
        exitCode: 69,
        message: `the agent is stopping: ${method} refused, nothing was changed; try again after it restarts`,
      });
    }
    // The streaming write (ctl drain) the same way, through the Connect client.
    const c = await openAdminClient(a.dirs.socket);
    onTestFinished(() => c.close());
    const drained = (async () => {
      for await (const _ of c.client.drain({ all: true })) void _;
    })().catch((err: unknown) => Promise.reject(c.explain(err)));
    expect(await refusal(drained)).toEqual({ exitCode: 69, message: 'the agent is stopping: Drain refused, nothing was changed; try again after it restarts' });

    // Nothing was acted on: the uncordon refused left the cordon, and no refused act reached the audit.
    expect(existsSync(cordonFile)).toBe(true);
    expect(a.agent.events.list().slice(eventsBefore)).toEqual([]);
    // One line for the burst in the agent's log, not one per refusal.
    expect(a.records.filter((r) => r.msg === 'refused an admin write: the agent is stopping')).toHaveLength(1);
  });

  it('answers writes as before while the agent runs', async () => {
    const a = await stoppableAdmin();
    const adopt = await callUnaryJson<{ results?: unknown[] }>(a.dirs.socket, 'Adopt', {});
    expect(adopt.results ?? []).toEqual([]);
    await callUnaryJson(a.dirs.socket, 'Cordon', { cordon: true, reason: 'while running' });
    expect(existsSync(join(a.dirs.stateDir, 'cordon.json'))).toBe(true);
    expect(a.records.filter((r) => r.msg === 'refused an admin write: the agent is stopping')).toEqual([]);
  });

  it('serves no write that reaches a connection accepted before close(), when no stop signal was given', async () => {
    // Between the supervisor's close and the socket's, a connection the server had accepted but not yet read was
    // served after close(): a cordon or drain done there was answered, and lost. close() alone now refuses it.
    const dirs = newDirs();
    const { agent, close } = createInProcessAgent(dirs);
    onTestFinished(close);
    const admin = await AdminServer.listen({ socketPath: dirs.socket, group: '', backend: agent.admin, logger: captureLogger().logger });
    const socket = connect(dirs.socket);
    onTestFinished(() => void socket.destroy());
    await until(() => admin.openConnections === 1, 'the server to accept the connection');
    const closed = admin.close();
    const body = JSON.stringify({ cordon: true, reason: 'after close' });
    const answer = await exchangeOn(socket, `POST /llmgw.v1.AdminService/Cordon HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    await closed;
    // Refused in words, or cut by the close's grace: either way not done, and not said to be.
    if (!answer.startsWith('cut') && answer !== '') expect(answer).toMatch(/^HTTP\/1\.1 503[\s\S]*the agent is stopping: Cordon refused, nothing was changed/);
    expect(existsSync(join(dirs.stateDir, 'cordon.json'))).toBe(false);
  });
});
