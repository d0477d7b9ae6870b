import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadAgentConfig } from '../../../src/agent/config/load-agent-config.js';
import { LlmgwError } from '../../../src/lib/errors.js';

/*
 * Security review 4, F5: a plaintext gang endpoint (no tls keys) is read by
 * anyone who reaches it and answered for by whoever holds its port: loopback
 * only (agents on one machine, `llmgw dev`), unless insecure_plaintext says
 * the network is isolated. A plaintext control plane on loopback (a local
 * mTLS sidecar) no longer makes it plaintext on every interface.
 */

const dir = mkdtempSync(join(tmpdir(), 'llmgw-gang-plain-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;
function load(yaml: string) {
  const p = join(dir, `agent-${n++}.yaml`);
  writeFileSync(p, `node_id: gpu-01\nserver: http://127.0.0.1:8443\n${yaml}`);
  return loadAgentConfig({ configPath: p, env: {} }).config;
}
function refusal(yaml: string): LlmgwError {
  try {
    load(yaml);
  } catch (err) {
    if (err instanceof LlmgwError) return err;
    throw err;
  }
  throw new Error(`not refused: ${yaml}`);
}

describe('a plaintext gang_addr (security review 4, F5)', () => {
  it.each(['0.0.0.0:7471', '10.0.0.5:7471', '[::]:7471', 'gpu-01.example:7471'])('is refused off loopback (%s): exit 78, one line', (addr) => {
    const err = refusal(`gang_addr: "${addr}"\n`);
    expect(err.exitCode).toBe(78);
    expect(err.message).toBe(
      `gang_addr ${addr} is plaintext (no tls keys) on an address that is not loopback; set tls.cert, tls.key and tls.ca for mutual TLS, use a loopback address (agents on one machine), or set insecure_plaintext: true if this network is isolated (${join(dir, `agent-${n - 1}.yaml`)}:3)`,
    );
  });

  it.each(['127.0.0.1:0', '127.0.0.2:7471', '[::1]:7471', 'localhost:7471'])('is accepted on loopback (%s), as `llmgw dev` and agents on one machine use it', (addr) => {
    expect(load(`gang_addr: "${addr}"\n`).gangAddr).toBe(addr);
  });

  it('is accepted off loopback with insecure_plaintext (an isolated network, as for the control plane)', () => {
    expect(load('gang_addr: 10.0.0.5:7471\ninsecure_plaintext: true\n').gangAddr).toBe('10.0.0.5:7471');
  });
});
