import { describe, expect, it } from 'vitest';
import { describeConnection, describeTls, renderStatus } from '../../src/ctl/render-status.js';
import type { StatusResponseJson } from '../../src/gen/llmgw/v1/admin_pb.js';

const NOW = Date.parse('2026-01-02T10:00:00Z');

describe('renderStatus', () => {
  it('says when the agent retries: attempt, next try and last error', () => {
    expect(
      describeConnection(
        {
          server: 'https://cp:8443',
          protocol: 'grpc',
          state: 'CONNECTION_STATE_RETRYING',
          attempt: 3,
          nextAttemptAt: '2026-01-02T10:00:04Z',
          lastError: 'connect ECONNREFUSED 10.0.0.1:8443',
        },
        NOW,
      ),
    ).toBe('retrying https://cp:8443 (grpc): attempt 3, next try in 4s; last error: connect ECONNREFUSED 10.0.0.1:8443');
  });

  it('says which account each engine runs as, one line each (security review 2, N1)', () => {
    const s: StatusResponseJson = {
      engineAccounts: [
        { engine: 'vllm', user: 'llmgw-engine', uid: 998, configured: true },
        { engine: 'sglang', user: 'root', uid: 0, allowRoot: true },
        { engine: 'sim', user: 'root', uid: 0, refused: true },
      ],
      shards: [],
    };
    expect(renderStatus(s, NOW).split('\n').filter((l) => l.startsWith('account'))).toEqual([
      'account    vllm → llmgw-engine (uid 998)',
      'account    sglang → root (allow_root)',
      'account    sim → root: refused; set engines.sim.user to an unprivileged account (or engines.sim.allow_root: true)',
    ]);
  });

  it('says how warm the node is for each model it measured, at most five, and how long each would take to READY (issue 41)', () => {
    const warmth = Array.from({ length: 7 }, (_, i) => ({
      model: `acme/m${i}`,
      engine: 'vllm',
      profile: 'tp1',
      rung: i === 0 ? 'serving' : 'store',
      learned: i === 0 ? [{ from: 'store', medianSeconds: 41.2, samples: 3 }, { from: 'hub', medianSeconds: 365, samples: 1 }] : [],
    }));
    const lines = renderStatus({ inventory: { warmth }, shards: [] }, NOW).split('\n').filter((l) => l.startsWith('warmth'));
    expect(lines).toEqual([
      'warmth     acme/m0 (vllm, tp1): serving now; to READY from store 41.2s (×3), from hub 365s (×1)',
      'warmth     acme/m1 (vllm, tp1): store now',
      'warmth     acme/m2 (vllm, tp1): store now',
      'warmth     acme/m3 (vllm, tp1): store now',
      'warmth     acme/m4 (vllm, tp1): store now',
      'warmth     2 more: ctl status --json',
    ]);
  });

  it("says the node's measured disk and pull rates with how and when each was measured, and which are not yet (issue 52)", () => {
    const rates = {
      diskWrite: { bytesPerSecond: 812 * 1024 * 1024, bytes: '67108864', measuredAt: '2026-01-02T08:00:00Z', source: 'probe' },
      lastPull: { bytesPerSecond: 240 * 1024 * 1024, bytes: '134217728', measuredAt: '2026-01-02T09:55:00Z', source: 'pull' },
    };
    const lines = renderStatus({ inventory: { rates }, shards: [] }, NOW).split('\n').filter((l) => l.startsWith('rates'));
    expect(lines).toEqual(['rates      disk write 812 MiB/s (probe, 2h ago), disk read not measured, last pull 240 MiB/s (pull, 5m ago)']);
    // Its look-alike: an agent that measured nothing prints no line.
    expect(renderStatus({ inventory: {}, shards: [] }, NOW)).not.toMatch(/^rates/m);
  });

  it('says since when the agent is connected', () => {
    expect(describeConnection({ server: 'http://cp:8443', protocol: 'connect', state: 'CONNECTION_STATE_CONNECTED', connectedSince: '2026-01-02T09:57:00Z' }, NOW)).toBe(
      'connected to http://cp:8443 (connect) since 2026-01-02T09:57:00.000Z (3m)',
    );
  });

  it('shows the client certificate, marks one expiring within tls.expiry_warning, and names the CA or the system trust store', () => {
    const t = { certPath: '/etc/llmgw/tls/agent.crt', certSubject: 'CN=n1', certNotAfter: '2026-01-05T10:00:00Z', ca: '/etc/llmgw/tls/ca.crt' };
    expect(describeTls(t, NOW)).toBe('cert /etc/llmgw/tls/agent.crt (CN=n1), valid until 2026-01-05T10:00:00.000Z; ca /etc/llmgw/tls/ca.crt');
    expect(describeTls({ ...t, certExpiresSoon: true }, NOW)).toBe(
      'cert /etc/llmgw/tls/agent.crt (CN=n1), valid until 2026-01-05T10:00:00.000Z (expires in 3d); ca /etc/llmgw/tls/ca.crt',
    );
    expect(describeTls({ ...t, certNotAfter: '2026-01-02T08:00:00Z', certExpiresSoon: true }, NOW)).toContain('(EXPIRED 2h ago)');
    expect(describeTls({ ca: 'system trust store' }, NOW)).toBe('no client certificate; ca system trust store');
    // docs/security.md promises the SHA-256 fingerprint on this line.
    const fingerprint = 'AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89';
    expect(describeTls({ ...t, certFingerprintSha256: fingerprint }, NOW)).toBe(
      `cert /etc/llmgw/tls/agent.crt (CN=n1), valid until 2026-01-05T10:00:00.000Z, sha256 ${fingerprint}; ca /etc/llmgw/tls/ca.crt`,
    );
    const s: StatusResponseJson = {
      connection: { server: 'https://cp:1', state: 'CONNECTION_STATE_CONNECTED', tls: { ...t, certSubject: 'CN=n1\u001b[2J' } },
      shards: [],
    };
    expect(renderStatus(s, NOW).split('\n')[2]).toBe(
      'tls        cert /etc/llmgw/tls/agent.crt (CN=n1\\x1b[2J), valid until 2026-01-05T10:00:00.000Z; ca /etc/llmgw/tls/ca.crt',
    );
    // No line over h2c.
    expect(renderStatus({ ...s, connection: { server: 'http://cp:1' } }, NOW)).not.toContain('tls ');
  });

  it('renders an agent without GPUs or shards, with its warnings', () => {
    const s: StatusResponseJson = {
      nodeId: 'n1',
      version: '1.2.3',
      pid: 42,
      startedAt: '2026-01-02T09:00:00Z',
      connection: { server: 'http://cp:1', protocol: 'connect', state: 'CONNECTION_STATE_STARTING' },
      inventory: { warnings: ['nvidia-smi not found: no NVIDIA driver'] },
      shards: [],
    };
    expect(renderStatus(s, NOW)).toBe(
      [
        'node       n1  (llmgw 1.2.3, pid 42, up 1h)',
        'control    starting (recovering engines, reading the hardware); will connect to http://cp:1 (connect)',
        'inventory  no GPUs; no NVIDIA driver',
        'warning    nvidia-smi not found: no NVIDIA driver',
        '',
        'no shards',
      ].join('\n'),
    );
  });

  it('prints the --all hint only when the agent says it hid ended shards, with how many (walkthrough 4, O20)', () => {
    const s: StatusResponseJson = { nodeId: 'n1', shards: [] };
    const hint = (r: StatusResponseJson, endedHidden: boolean) => renderStatus(r, NOW, { endedHidden }).split('\n').filter((l) => l.includes('ctl status --all'));
    expect(hint(s, true)).toEqual([]);
    expect(hint({ ...s, endedHidden: 0 }, true)).toEqual([]);
    expect(hint({ ...s, endedHidden: 1 }, true)).toEqual(['1 ended shard (STOPPED, FAILED, EXITED) whose engine is gone is not listed: ctl status --all']);
    expect(hint({ ...s, endedHidden: 9 }, true)).toEqual(['9 ended shards (STOPPED, FAILED, EXITED) whose engine is gone are not listed: ctl status --all']);
    // Asked with --all or --state: nothing was hidden by default.
    expect(hint({ ...s, endedHidden: 9 }, false)).toEqual([]);
  });

  it('lists a failed shard in the table and its error below it', () => {
    const out = renderStatus(
      {
        nodeId: 'n1',
        shards: [
          {
            shardId: 's1',
            replicaId: 'r1',
            engine: 'vllm',
            model: 'meta/llama',
            state: 'SHARD_STATE_FAILED',
            pid: 0,
            httpPort: 8000,
            gpuIndices: [0, 1],
            startedAt: '2026-01-02T09:59:30Z',
            adopted: true,
            error: 'engine exited with code 1 while starting',
            exitCode: 1,
          },
        ],
      },
      NOW,
    );
    const lines = out.split('\n');
    expect(lines.at(-2)?.trim().split(/\s{2,}/)).toEqual(['s1', 'r1', 'vllm', 'meta/llama', 'FAILED', '-', '8000', '0,1', '30s', 'yes', '-']);
    expect(lines.at(-1)).toBe('s1: engine exited with code 1 while starting (exit code 1)');
  });

  it("says an engine's note below the table: an adopted engine whose unit systemd forgot is watched by pid", () => {
    const note = 'unit llmgw-shard-s1.service forgotten by systemd (LoadState not-found); watched by pid';
    const out = renderStatus(
      { nodeId: 'n1', shards: [{ shardId: 's1', state: 'SHARD_STATE_READY', pid: 42, adopted: true, launcher: 'systemd-run', note }] },
      NOW,
    );
    const lines = out.split('\n');
    expect(lines.at(-2)?.trim().split(/\s{2,}/).at(-1)).toBe('(systemd-run)');
    expect(lines.at(-1)).toBe(`s1: note: ${note}`);
  });

  it("says the engine's version below the table, as it answered at READY (issue 47)", () => {
    const out = renderStatus({ nodeId: 'n1', shards: [{ shardId: 's1', state: 'SHARD_STATE_READY', pid: 42, engineVersion: '0.22.0' }] }, NOW);
    expect(out.split('\n').at(-1)).toBe('s1: engine version 0.22.0');
  });

  it('shows control characters from the control plane escaped in the table and the error lines', () => {
    const out = renderStatus(
      {
        nodeId: 'n1',
        shards: [
          {
            shardId: 'ansi-g1-r0',
            replicaId: 'r\u001b[2J\u001b[H\u001b]0;owned-title\u0007',
            engine: 'sim',
            model: 'm\u001b[8m',
            state: 'SHARD_STATE_FAILED',
            error: 'boom\u001b[31m\nsecond line',
          },
        ],
      },
      NOW,
    );
    // biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
    expect(out).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/);
    expect(out).toContain('r\\x1b[2J\\x1b[H\\x1b]0;owned-title\\x07');
    expect(out).toContain('m\\x1b[8m');
    expect(out.split('\n').at(-1)).toBe('ansi-g1-r0: boom\\x1b[31m\\x0asecond line');
  });
});
