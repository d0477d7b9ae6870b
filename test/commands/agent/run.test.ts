import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runCli } from '../../helpers/run-cli.js';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-run-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('llmgw agent run --print-config', () => {
  it('prints every effective value with its source', async () => {
    const r = await runCli(['agent', 'run', '--config', 'examples/agent.yaml', '--print-config', '--heartbeat-interval', '2s'], {
      env: { LLMGW_RECONNECT_MAX: '45s' },
    });
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toMatch(/^node_id\s+gpu-node-01\s+examples\/agent\.yaml:7$/m);
    expect(r.stdout).toMatch(/^heartbeat_interval\s+2s\s+flag --heartbeat-interval$/m);
    expect(r.stdout).toMatch(/^reconnect_max\s+45s\s+env LLMGW_RECONNECT_MAX$/m);
  });

  it('prints JSON with --json', async () => {
    const r = await runCli(['agent', 'run', '--config', 'examples/agent.yaml', '--print-config', '--json']);
    expect(r.exitCode).toBe(0);
    const out = JSON.parse(r.stdout);
    expect(out.keys.server).toEqual({ value: 'http://127.0.0.1:8443', source: 'examples/agent.yaml:10' });
    expect(out.effective.supervisor.stopGraceMs).toBe(30_000);
  });

  it('exits 78 with one line and no stack trace on a configuration error', async () => {
    const path = join(dir, 'bad.yaml');
    writeFileSync(path, 'node_id: a\nserver: http://cp:1\nheartbeat_interval: fast\n');
    const r = await runCli(['agent', 'run', '--config', path, '--print-config']);
    expect(r.exitCode).toBe(78);
    expect(r.stderr.trim().split('\n')).toEqual([
      `error: heartbeat_interval: "fast" is not a duration; write it like 500ms, 5s, 2m or 1h (${path}:3)`,
    ]);
  });

  it('exits 78 when TLS settings contradict the server scheme given by flag', async () => {
    const cert = join(dir, 'c.pem');
    writeFileSync(cert, 'x');
    const path = join(dir, 'tls.yaml');
    writeFileSync(path, `node_id: a\nserver: https://cp:1\ntls:\n  cert: ${cert}\n  key: ${cert}\n`);
    const r = await runCli(['agent', 'run', '--config', path, '--server', 'http://cp:1', '--print-config']);
    expect(r.exitCode).toBe(78);
    expect(r.stderr.trim()).toBe('error: tls is configured but server is an http:// address; use https:// (flag --server)');
  });

  it('exits 2 on an unknown flag', async () => {
    const r = await runCli(['agent', 'run', '--bogus']);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toContain('--bogus');
  });
});
