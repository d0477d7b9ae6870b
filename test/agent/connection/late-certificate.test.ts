import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { create } from '@bufbuild/protobuf';
import { createClient } from '@connectrpc/connect';
import { writeFileSync } from 'node:fs';
import { describe, expect, it, onTestFinished } from 'vitest';
import { loadConfigForPrint, renderConfigTable } from '../../../src/agent/config/print-config.js';
import { createControlPlaneTransport } from '../../../src/agent/connection/control-plane-transport.js';
import { type AgentMessage, AgentMessageSchema, AgentService } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { agentDirs, startAgentProcess } from '../../helpers/agent-process.js';
import { until } from '../../helpers/engine-processes.js';
import { type TestCerts, makeTestCerts } from '../../helpers/make-test-certs.js';
import { runCli } from '../../helpers/run-cli.js';
import { isRegister } from '../../helpers/sim-shards.js';
import { startControlPlane } from '../../helpers/start-control-plane.js';

/*
 * Issue 28, "Certificates that arrive late" (new-operator walkthrough 2,
 * row 2): a Vault agent, cert-manager or SPIRE writes the node's certificate
 * a few seconds after boot. The real agent waits for it instead of exiting
 * 78 (which systemd's RestartPreventExitStatus=78 never restarts), and a key
 * that is not the certificate's is exit 78 naming both files.
 */

async function certs(name = 'node-a'): Promise<TestCerts> {
  const c = await makeTestCerts(name);
  onTestFinished(() => c.cleanup());
  return c;
}

function tmp(): string {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-late-cert-'));
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

const tlsYaml = (cert: string, key: string, ca: string) => `tls:\n  cert: ${cert}\n  key: ${key}\n  ca: ${JSON.stringify(ca)}\n`;

describe('certificates that arrive late', () => {
  it('waits for a client certificate and key written after boot, says so in the log and ctl status, and registers without a restart', { timeout: 90_000 }, async () => {
    const c = await certs();
    const { cp, url } = await startControlPlane({ tls: { cert: c.serverCert, key: c.serverKey, ca: c.ca } });
    const dir = tmp();
    const files = { cert: join(dir, 'tls', 'node.crt'), key: join(dir, 'tls', 'node.key') };
    const dirs = agentDirs(join(dir, 'agent'));
    const agent = startAgentProcess({ server: url.replace('http://', 'https://'), dirs, extraYaml: tlsYaml(files.cert, files.key, c.ca) });
    let exit: unknown;
    void agent.exited.then((e) => {
      exit = e;
    });

    const waitLine = `waiting for tls.cert ${files.cert} (not written yet)`;
    await until(() => agent.logs().some((r) => String(r.msg).startsWith(waitLine)) || exit !== undefined, 'the agent logs which file it waits for');
    expect(exit, JSON.stringify(agent.logs().slice(-3))).toBeUndefined();
    const status = await runCli(['ctl', 'status', '--json', '--socket', dirs.socket]);
    expect(status.exitCode, status.stderr).toBe(0);
    expect(JSON.parse(status.stdout).connection.lastError).toBe(waitLine);

    // Three times the reconnect backoff's cap (1 s here): several retries, each silent.
    await delay(3000);
    expect(exit, 'the agent is still running 3 s later').toBeUndefined();
    // Retried with the reconnect backoff (1 s at most here), logged once.
    expect(agent.logs().filter((r) => String(r.msg).startsWith(waitLine))).toHaveLength(1);
    expect(cp.nodes().find((n) => n.id === 'node-a')).toBeUndefined();

    // What the certificate issuer does: the files appear.
    mkdirSync(join(dir, 'tls'));
    copyFileSync(c.clientKey, files.key);
    chmodSync(files.key, 0o600);
    copyFileSync(c.clientCert, files.cert);
    await cp.waitFor('node-a', isRegister, 30_000);
    process.kill(agent.pid, 0);
    expect(exit).toBeUndefined();
    expect(agent.logs().filter((r) => r.msg === 'agent starting')).toHaveLength(1);
    expect(agent.logs().some((r) => r.msg === 'the TLS files are written; connecting with them')).toBe(true);
  });

  it('refuses a key that is not the certificate\'s at start: exit 78 naming both files', { timeout: 60_000 }, async () => {
    const c = await certs();
    const other = await certs('node-b');
    const { url } = await startControlPlane({ tls: { cert: c.serverCert, key: c.serverKey, ca: c.ca } });
    const dirs = agentDirs(tmp());
    const agent = startAgentProcess({ server: url.replace('http://', 'https://'), dirs, extraYaml: tlsYaml(c.clientCert, other.clientKey, c.ca) });
    const exited = await Promise.race([agent.exited, delay(30_000).then(() => undefined)]);
    expect(exited?.exitCode, JSON.stringify(agent.logs().slice(-3))).toBe(78);
    const line = agent.logs().map((r) => JSON.stringify(r)).find((l) => l.includes('is not the private key of'));
    expect(line, JSON.stringify(agent.logs())).toBeDefined();
    expect(line).toContain(other.clientKey);
    expect(line).toContain(c.clientCert);
  });
});

describe('the checks behind it', () => {
  it('--print-config says a certificate not written yet will be waited for, and would start', async () => {
    const dir = tmp();
    const path = join(dir, 'agent.yaml');
    writeFileSync(path, `node_id: a\nserver: https://cp:8443\n${tlsYaml(join(dir, 'node.crt'), join(dir, 'node.key'), '')}`);
    const p = loadConfigForPrint({ configPath: path, env: {} });
    expect(p.startProblems).toEqual([]);
    expect(p.startNotes).toEqual([
      `tls.cert ${join(dir, 'node.crt')} is not yet written; the agent will wait for it and connect once it is there`,
      `tls.key ${join(dir, 'node.key')} is not yet written; the agent will wait for it and connect once it is there`,
    ]);
    expect(renderConfigTable(p)).toContain(`note: tls.cert ${join(dir, 'node.crt')} is not yet written; the agent will wait`);
  });

  it('a key that stops matching after a rotation names both files at the next connection, not OpenSSL\'s mismatch', async () => {
    const c = await certs();
    const other = await certs('node-b');
    const transport = createControlPlaneTransport({
      server: 'https://127.0.0.1:1',
      protocol: 'connect',
      tls: { cert: c.clientCert, key: other.clientKey, ca: c.ca },
      pingIntervalMs: 1000,
      pingTimeoutMs: 1000,
    });
    const client = createClient(AgentService, transport);
    async function* requests(): AsyncIterable<AgentMessage> {
      yield create(AgentMessageSchema, { messageId: 1n, msg: { case: 'register', value: { nodeId: 'a', hostname: 'h', version: 'test' } } });
    }
    const drain = async () => {
      for await (const _ of client.connect(requests())) {
        // nothing expected
      }
    };
    await expect(drain()).rejects.toThrow(`tls.key ${other.clientKey} is not the private key of tls.cert ${c.clientCert}`);
  });
});
