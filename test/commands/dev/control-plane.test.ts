import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, describe, expect, it, onTestFinished } from 'vitest';
import { FakeAgent, isStart } from '../../helpers/fake-agent.js';
import { BIN, runCli } from '../../helpers/run-cli.js';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-dev-cp-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/**
 * Collects a child's stdout from the start, so that a line printed before a
 * test begins waiting for it is still found.
 */
function collectLines(stream: NodeJS.ReadableStream) {
  let text = '';
  const listeners = new Set<() => void>();
  stream.on('data', (chunk: Buffer) => {
    text += chunk.toString();
    for (const l of [...listeners]) l();
  });
  return {
    /** Resolves with the first complete line matching `re`. */
    waitFor(re: RegExp): Promise<RegExpExecArray> {
      return new Promise((resolve) => {
        const check = () => {
          for (const line of text.split('\n').slice(0, -1)) {
            const m = re.exec(line);
            if (m) {
              listeners.delete(check);
              resolve(m);
              return;
            }
          }
        };
        listeners.add(check);
        check();
      });
    },
  };
}

describe('llmgw dev control-plane', () => {
  it('prints its URL, places the example deployment on an agent, and exits 0 on SIGINT', async () => {
    const child = execa(
      process.execPath,
      [BIN, 'dev', 'control-plane', '--listen', '127.0.0.1:0', '--deployment', 'examples/deployment.yaml', '--placement-delay', '0s', '--json-events', '--log-level', 'warn'],
      { reject: false, stdin: 'ignore', timeout: 60_000, env: { NO_COLOR: '1' } },
    );
    onTestFinished(() => {
      if (child.exitCode === null) child.kill('SIGKILL');
    });
    const stdout = collectLines(child.stdout);
    const [, url] = await stdout.waitFor(/^listening on (http:\/\/127\.0\.0\.1:\d+)$/);
    const agent = new FakeAgent({ baseUrl: url as string, nodeId: 'node-a', gpus: 2 });
    onTestFinished(() => agent.kill());
    const first = await agent.waitFor(isStart);
    await agent.waitFor((m) => isStart(m) && m !== first);
    await stdout.waitFor(/"event":"node-registered".*"nodeId":"node-a"/);

    child.kill('SIGINT');
    const result = await child;
    expect(result.exitCode).toBe(0);
    // The agent saw a clean close, which makes a real agent reconnect at once.
    await expect(agent.done).resolves.toBeUndefined();
  });

  it('exits 78 with one line naming file:line on a bad deployment', async () => {
    const path = join(dir, 'bad.yaml');
    writeFileSync(path, 'profiles:\n  p:\n    engine: sim\n    model: m\n    gpus: 2\nreplicas: []\n');
    const r = await runCli(['dev', 'control-plane', '--listen', '127.0.0.1:0', '--deployment', path]);
    expect(r.exitCode).toBe(78);
    expect(r.stderr.trim().split('\n')).toEqual([`error: profiles.p.gpus: unknown key; known keys: engine, model, served_model_name, tensor_parallel_size, pipeline_parallel_size, args, env, startup_timeout, min_compute_capability, sleep_mode, prefetch (${path}:5)`]);
  });

  it('exits 2 when only some of the TLS flags are given', async () => {
    const r = await runCli(['dev', 'control-plane', '--listen', '127.0.0.1:0', '--tls-cert', 'x.pem']);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toContain('--tls-cert, --tls-key and --tls-ca go together');
  });
});
