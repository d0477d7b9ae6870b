import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, chmodSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadAgentConfig } from '../../../src/agent/config/load-agent-config.js';
import { LlmgwError } from '../../../src/lib/errors.js';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let n = 0;
function file(text: string): string {
  const p = join(dir, `agent-${n++}.yaml`);
  writeFileSync(p, text);
  return p;
}

const MINIMAL = 'node_id: gpu-01\nserver: http://127.0.0.1:8443\n';

function configErrorOf(fn: () => unknown): LlmgwError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(LlmgwError);
    const e = err as LlmgwError;
    expect(e.exitCode).toBe(78);
    expect(e.message).not.toContain('\n');
    return e;
  }
  throw new Error('expected a configuration error');
}

describe('loadAgentConfig', () => {
  it('fills every default when the file gives only the required keys', () => {
    const { config } = loadAgentConfig({ configPath: file(MINIMAL), env: {} });
    expect(config.nodeId).toBe('gpu-01');
    expect(config.protocol).toBe('connect');
    expect(config.heartbeatIntervalMs).toBe(5000);
    expect(config.reconnectBaseMs).toBe(1000);
    expect(config.reconnectMaxMs).toBe(30_000);
    expect(config.adoptReadyTimeoutMs).toBe(60_000);
    expect(config.mgmtInterface).toBe('eth0');
    expect(config.discovery).toEqual({ nvidiaSmi: 'nvidia-smi', sysfsRoot: '/', preferNvml: true, nvmlLibrary: 'libnvidia-ml.so.1', kmsg: '/dev/kmsg', intervalMs: 60_000, foreignMemoryShare: 0.05, timeoutMs: 10_000 });
    expect(config.supervisor).toEqual({
      stateDir: '/var/lib/llmgw',
      logDir: '/var/log/llmgw',
      stopGraceMs: 30_000,
      knownAnswerIntervalMs: 0,
      knownAnswerTimeoutMs: 30_000,
      wakeTimeoutMs: 0,
      workerSettleMs: 10_000,
      healthIntervalMs: 10_000,
      stallTimeoutMs: 60_000,
      logMaxBytes: 64 * 1024 * 1024,
      logRetentionMs: 168 * 3_600_000,
      logRetentionBytes: 1024 ** 3,
      keepPreviousRuns: 3,
      keepTerminalShards: 16,
      terminalRetentionMs: 3_600_000,
      diskPressure: { minFree: 1024 ** 3, minFreeInodes: 0.05, intervalMs: 10_000 },
      launcher: 'auto',
      unitProperties: {},
    });
    expect(config.admin).toEqual({ socket: '/run/llmgw/agent.sock', group: '', readGroup: '' });
    expect(config.engines).toEqual({});
  });

  it('takes flags over env over file over defaults, and says where each came from', () => {
    const path = file(`${MINIMAL}heartbeat_interval: 7s\nreconnect_base: 2s\nsupervisor:\n  stop_grace: 9s\n`);
    const loaded = loadAgentConfig({
      configPath: path,
      env: { LLMGW_HEARTBEAT_INTERVAL: '3s', LLMGW_RECONNECT_BASE: '4s' },
      flags: { heartbeat_interval: '1s' },
    });
    expect(loaded.config.heartbeatIntervalMs).toBe(1000);
    expect(loaded.config.reconnectBaseMs).toBe(4000);
    expect(loaded.config.supervisor.stopGraceMs).toBe(9000);
    expect(loaded.config.supervisor.workerSettleMs).toBe(10_000);
    expect(loaded.sources.get('heartbeat_interval')).toEqual({ kind: 'flag', name: 'heartbeat-interval' });
    expect(loaded.sources.get('reconnect_base')).toEqual({ kind: 'env', name: 'LLMGW_RECONNECT_BASE' });
    expect(loaded.sources.get('supervisor.stop_grace')).toEqual({ kind: 'file', path, line: 6 });
    expect(loaded.sources.get('reconnect_max')).toEqual({ kind: 'default' });
  });

  it('reads maps and lists from the environment', () => {
    const { config } = loadAgentConfig({
      configPath: file(MINIMAL),
      env: { LLMGW_LABELS: 'rack=r1,zone=z', LLMGW_FABRICS: 'mlx5_0=a,mlx5_1=b', LLMGW_SOCKET: '/tmp/s.sock' },
    });
    expect(config.labels).toEqual({ rack: 'r1', zone: 'z' });
    expect(config.fabrics).toEqual([
      { hca: 'mlx5_0', fabric: 'a' },
      { hca: 'mlx5_1', fabric: 'b' },
    ]);
    expect(config.admin.socket).toBe('/tmp/s.sock');
  });

  it('refuses a timer key longer than a Node timer waits (which fires such a delay at once), and keeps ages that may be longer', () => {
    const path = file(`${MINIMAL}heartbeat_interval: 1000h\n`);
    expect(configErrorOf(() => loadAgentConfig({ configPath: path, env: {} })).message).toBe(`heartbeat_interval 1000h is longer than a timer can wait; set it to at most 596h (${path}:3)`);
    const nested = file(`${MINIMAL}supervisor:\n  disk_pressure:\n    interval: 700h\n`);
    expect(configErrorOf(() => loadAgentConfig({ configPath: nested, env: {} })).message).toMatch(/^supervisor\.disk_pressure\.interval 700h is longer than a timer can wait/);
    const longest = loadAgentConfig({ configPath: file(`${MINIMAL}heartbeat_interval: 596h\n`), env: {} });
    expect(longest.config.heartbeatIntervalMs).toBe(596 * 3_600_000);
    const ages = loadAgentConfig({ configPath: file(`${MINIMAL}tls:\n  expiry_warning: 2000h\nsupervisor:\n  log_retention: 2000h\n`), env: {} });
    expect(ages.config.supervisor.logRetentionMs).toBe(2000 * 3_600_000);
  });

  it('refuses a server without a scheme, saying to write http:// or https://', () => {
    const path = file('node_id: a\nserver: cp:8443\n');
    expect(configErrorOf(() => loadAgentConfig({ configPath: path, env: {} })).message).toBe(
      `server "cp:8443" has no scheme; write https://cp:8443 (mutual TLS) or http://cp:8443 (plaintext, loopback only unless insecure_plaintext: true) (${path}:2)`,
    );
  });

  it('refuses plaintext http:// beyond loopback unless insecure_plaintext is true', () => {
    const path = file('node_id: a\nserver: http://cp:8443\n');
    expect(configErrorOf(() => loadAgentConfig({ configPath: path, env: {} })).message).toBe(
      `server http://cp:8443 is plaintext http:// to a host that is not loopback; use https:// with tls, or set insecure_plaintext: true if this network is isolated (${path}:2)`,
    );
    expect(loadAgentConfig({ configPath: file('node_id: a\nserver: http://cp:8443\ninsecure_plaintext: true\n'), env: {} }).config.server).toBe('http://cp:8443');
    for (const host of ['127.0.0.1', '127.9.9.9', 'localhost', '[::1]']) {
      expect(loadAgentConfig({ configPath: file(`node_id: a\nserver: http://${host}:8443\n`), env: {} }).config.insecurePlaintext).toBe(false);
    }
    for (const host of ['10.0.0.1', '[::2]', '128.0.0.1', 'localhost.evil.com']) {
      expect(() => loadAgentConfig({ configPath: file(`node_id: a\nserver: http://${host}:8443\n`), env: {} })).toThrow(/is plaintext http:\/\//);
    }
  });

  it('refuses https:// with a CA but no client certificate: mutual TLS or nothing', () => {
    const ca = file('x');
    const path = file(`node_id: a\nserver: https://cp:8443\ntls:\n  ca: ${ca}\n`);
    expect(configErrorOf(() => loadAgentConfig({ configPath: path, env: {} })).message).toBe(
      `tls.cert and tls.key are required with an https:// server: the agent authenticates to the control plane with mutual TLS (${path}:4)`,
    );
  });

  it('takes gang_addr as host:port, and refuses one that is not, or one beside TLS without a CA to check peers by (issue 40)', () => {
    expect(loadAgentConfig({ configPath: file(`${MINIMAL}gang_addr: 127.0.0.1:0\n`), env: {} }).config.gangAddr).toBe('127.0.0.1:0');
    const bad = file(`${MINIMAL}gang_addr: http://10.0.0.5\n`);
    expect(configErrorOf(() => loadAgentConfig({ configPath: bad, env: {} })).message).toMatch(/^gang_addr "http:\/\/10\.0\.0\.5" is not host:port/);
    const pem = file('x');
    const noCa = file(`node_id: a\nserver: https://cp:8443\ngang_addr: 10.0.0.5:7471\ntls:\n  cert: ${pem}\n  key: ${pem}\n`);
    expect(() => loadAgentConfig({ configPath: noCa, env: {} })).toThrow(/gang_addr is set and tls\.ca is not: the gang endpoint serves and asks its peers by mutual TLS/);
  });

  it('takes gang_agent_grace as a duration, 10 s by default, and refuses 0s (an agent restart would break every gang)', () => {
    expect(loadAgentConfig({ configPath: file(MINIMAL), env: {} }).config.gangAgentGraceMs).toBe(10_000);
    expect(loadAgentConfig({ configPath: file(`${MINIMAL}gang_agent_grace: 30s\n`), env: {} }).config.gangAgentGraceMs).toBe(30_000);
    const zero = file(`${MINIMAL}gang_agent_grace: 0s\n`);
    expect(configErrorOf(() => loadAgentConfig({ configPath: zero, env: {} })).message).toMatch(/^gang_agent_grace must be greater than 0 /);
  });

  it('takes supervisor.known_answer_timeout as a duration, 30 s by default, and refuses 0s, a negative and a non-duration in one line', () => {
    expect(loadAgentConfig({ configPath: file(MINIMAL), env: {} }).config.supervisor.knownAnswerTimeoutMs).toBe(30_000);
    expect(loadAgentConfig({ configPath: file(`${MINIMAL}supervisor:\n  known_answer_timeout: 2m\n`), env: {} }).config.supervisor.knownAnswerTimeoutMs).toBe(120_000);
    const refusal = (value: string) => configErrorOf(() => loadAgentConfig({ configPath: file(`${MINIMAL}supervisor:\n  known_answer_timeout: ${value}\n`), env: {} })).message;
    expect(refusal('0s')).toMatch(/^supervisor\.known_answer_timeout must be greater than 0 /);
    expect(refusal('-5s')).toMatch(/^supervisor\.known_answer_timeout: "-5s" is not a duration; write it like 500ms, 5s, 2m or 1h/);
    expect(refusal('soon')).toMatch(/^supervisor\.known_answer_timeout: "soon" is not a duration/);
    for (const m of [refusal('0s'), refusal('-5s'), refusal('soon')]) expect(m).not.toContain('\n');
  });

  it('takes stream_stall_timeout as a duration, 0s (derived from the heartbeat) by default, and refuses a non-duration in one line', () => {
    expect(loadAgentConfig({ configPath: file(MINIMAL), env: {} }).config.streamStallTimeoutMs).toBe(0);
    expect(loadAgentConfig({ configPath: file(`${MINIMAL}stream_stall_timeout: 45s\n`), env: {} }).config.streamStallTimeoutMs).toBe(45_000);
    const bad = configErrorOf(() => loadAgentConfig({ configPath: file(`${MINIMAL}stream_stall_timeout: -3s\n`), env: {} })).message;
    expect(bad).toMatch(/^stream_stall_timeout: "-3s" is not a duration; write it like 500ms, 5s, 2m or 1h/);
    expect(bad).not.toContain('\n');
  });

  it('defaults register_timeout to off and tls.expiry_warning to 7 days', () => {
    const { config } = loadAgentConfig({ configPath: file(MINIMAL), env: {} });
    expect(config.registerTimeoutMs).toBe(0);
    expect(config.tls.expiryWarningMs).toBe(7 * 24 * 3600 * 1000);
  });

  it('reads allowed_env, user and enabled per engine, with safe defaults', () => {
    const { config } = loadAgentConfig({
      configPath: file(`${MINIMAL}engines:\n  vllm:\n    allowed_env: [HF_TOKEN, MY_*]\n    user: nobody\n  sim:\n    enabled: true\n  sglang: {}\n`),
      env: {},
    });
    expect(config.engines.vllm?.allowedEnv).toEqual(['HF_TOKEN', 'MY_*']);
    expect(config.engines.vllm?.user).toMatchObject({ name: 'nobody', uid: 65534, gid: 65534 });
    expect(config.engines.vllm?.user?.home).toBe(execFileSync('getent', ['passwd', 'nobody'], { encoding: 'utf8' }).split(':')[5]);
    expect(config.engines.sim?.enabled).toBe(true);
    expect(config.engines.sglang?.enabled).toBe(true);
    expect(config.engines.sglang?.allowedEnv).toContain('HF_*');
    expect(config.engines.sglang?.user).toBeUndefined();
    const quiet = loadAgentConfig({ configPath: file(`${MINIMAL}engines:\n  sim: {}\n`), env: {} }).config;
    expect(quiet.engines.sim?.enabled).toBe(false);
  });

  it('refuses an engine user that does not exist, and allowed_env patterns with a wildcard elsewhere than the end', () => {
    const noUser = file(`${MINIMAL}engines:\n  vllm:\n    user: no-such-user-here\n`);
    expect(configErrorOf(() => loadAgentConfig({ configPath: noUser, env: {} })).message).toBe(
      `engines: vllm.user: no account named "no-such-user-here" on this node; create it (useradd --system no-such-user-here) or fix the name (${noUser}:3)`,
    );
    const glob = file(`${MINIMAL}engines:\n  vllm:\n    allowed_env: ["*_TOKEN"]\n`);
    expect(configErrorOf(() => loadAgentConfig({ configPath: glob, env: {} })).message).toBe(
      `engines: vllm.allowed_env: "*_TOKEN" is not a variable name or a NAME_* prefix (only a trailing * is a wildcard) (${glob}:3)`,
    );
  });

  it('reads engine settings as argv lists', () => {
    const { config } = loadAgentConfig({
      configPath: file(`${MINIMAL}engines:\n  vllm:\n    command: [/opt/vllm/bin/vllm, serve]\n    env: {HF_HOME: /models}\n    extra_args: [--enforce-eager]\n`),
      env: {},
    });
    expect(config.engines.vllm).toMatchObject({ command: ['/opt/vllm/bin/vllm', 'serve'], env: { HF_HOME: '/models' }, extraArgs: ['--enforce-eager'], enabled: true });
  });

  describe('refuses, with exit 78 and one line naming the key and the file', () => {
    it('a missing required key', () => {
      const path = file('server: http://cp:1\n');
      expect(configErrorOf(() => loadAgentConfig({ configPath: path, env: {} })).message).toBe(`node_id is required (set it in ${path}, LLMGW_NODE_ID, --node-id)`);
    });

    it('a missing server', () => {
      const path = file('node_id: a\n');
      expect(configErrorOf(() => loadAgentConfig({ configPath: path, env: {} })).message).toBe(`server is required (set it in ${path}, LLMGW_SERVER, --server)`);
    });

    it('an unknown key, with the nearest valid name', () => {
      const path = file(`${MINIMAL}heartbeat_intervl: 5s\n`);
      expect(configErrorOf(() => loadAgentConfig({ configPath: path, env: {} })).message).toBe(
        `unknown key heartbeat_intervl (${path}:3); did you mean heartbeat_interval?`,
      );
    });

    it('an unknown key inside a section', () => {
      const path = file(`${MINIMAL}supervisor:\n  stop_grase: 5s\n`);
      expect(configErrorOf(() => loadAgentConfig({ configPath: path, env: {} })).message).toBe(
        `unknown key supervisor.stop_grase (${path}:4); did you mean supervisor.stop_grace?`,
      );
    });

    it('a count that is not a whole number of 0 or more, and takes one from the environment', () => {
      const path = file(`${MINIMAL}supervisor:\n  keep_previous_runs: -1\n`);
      expect(configErrorOf(() => loadAgentConfig({ configPath: path, env: {} })).message).toMatch(
        /^supervisor\.keep_previous_runs: must be a whole number of 0 or more, got number -1 \(/,
      );
      const ok = loadAgentConfig({ configPath: file(MINIMAL), env: { LLMGW_SUPERVISOR_KEEP_PREVIOUS_RUNS: '0' } });
      expect(ok.config.supervisor.keepPreviousRuns).toBe(0);
    });

    it('a key written at the wrong level', () => {
      const path = file(`${MINIMAL}state_dir: /x\n`);
      expect(configErrorOf(() => loadAgentConfig({ configPath: path, env: {} })).message).toContain('did you mean supervisor.state_dir?');
    });

    it('a bad duration, showing the value', () => {
      const path = file(`${MINIMAL}heartbeat_interval: 5 seconds\n`);
      expect(configErrorOf(() => loadAgentConfig({ configPath: path, env: {} })).message).toBe(
        `heartbeat_interval: "5 seconds" is not a duration; write it like 500ms, 5s, 2m or 1h (${path}:3)`,
      );
    });

    it('a duration written as a bare number', () => {
      const path = file(`${MINIMAL}supervisor:\n  stop_grace: 30\n`);
      expect(configErrorOf(() => loadAgentConfig({ configPath: path, env: {} })).message).toBe(
        `supervisor.stop_grace: must be a duration string such as 500ms, 5s or 2m, got number 30 (write 30s?) (${path}:4)`,
      );
    });

    it('a bad duration from the environment, naming the variable', () => {
      const path = file(MINIMAL);
      expect(configErrorOf(() => loadAgentConfig({ configPath: path, env: { LLMGW_RECONNECT_MAX: 'soon' } })).message).toBe(
        'reconnect_max: "soon" is not a duration; write it like 500ms, 5s, 2m or 1h (env LLMGW_RECONNECT_MAX)',
      );
    });

    it('a wrong type', () => {
      const path = file(`${MINIMAL}labels: [a, b]\n`);
      expect(configErrorOf(() => loadAgentConfig({ configPath: path, env: {} })).message).toBe(
        `labels: must be a map of strings, got a list (${path}:3)`,
      );
    });

    it('a value outside an enum', () => {
      const path = file(`${MINIMAL}protocol: http3\n`);
      expect(configErrorOf(() => loadAgentConfig({ configPath: path, env: {} })).message).toBe(
        `protocol: must be one of connect, grpc, got string "http3" (${path}:3)`,
      );
    });

    it('an engine command given as a shell string', () => {
      const path = file(`${MINIMAL}engines:\n  vllm:\n    command: "vllm serve; rm -rf /"\n`);
      expect(configErrorOf(() => loadAgentConfig({ configPath: path, env: {} })).message).toMatch(/engines: vllm.command .* looks like a shell string; give an argv list/);
    });

    it('an unknown engine, with the nearest name', () => {
      const path = file(`${MINIMAL}engines:\n  vlm: {}\n`);
      expect(configErrorOf(() => loadAgentConfig({ configPath: path, env: {} })).message).toBe(
        `engines: unknown engine vlm; did you mean vllm? (${path}:3)`,
      );
    });

    it('an unparseable file, with the line', () => {
      const path = file(`${MINIMAL}labels: {a: b\n`);
      expect(configErrorOf(() => loadAgentConfig({ configPath: path, env: {} })).message).toMatch(new RegExp(`^cannot parse config ${path}:\\d+: `));
    });

    it('a file that is not a map', () => {
      const path = file('- node_id\n');
      expect(configErrorOf(() => loadAgentConfig({ configPath: path, env: {} })).message).toBe(
        `config ${path} must be a map of keys (node_id: ..., server: ...), not a list`,
      );
    });

    it('a missing file named by --config', () => {
      expect(configErrorOf(() => loadAgentConfig({ configPath: join(dir, 'nope.yaml'), env: {} })).message).toBe(
        `cannot read config ${join(dir, 'nope.yaml')}: no such file`,
      );
    });

    it.runIf(process.getuid?.() !== 0)('an unreadable file', () => {
      const path = file(MINIMAL);
      chmodSync(path, 0o000);
      expect(configErrorOf(() => loadAgentConfig({ configPath: path, env: {} })).message).toBe(`cannot read config ${path}: permission denied`);
    });

    it('a directory given as the file', () => {
      expect(configErrorOf(() => loadAgentConfig({ configPath: dir, env: {} })).message).toBe(`cannot read config ${dir}: it is a directory`);
    });

    it('an https:// server without certificates', () => {
      const path = file('node_id: a\nserver: https://cp:8443\n');
      expect(configErrorOf(() => loadAgentConfig({ configPath: path, env: {} })).message).toBe(
        `server is an https:// address but no tls certificates are configured; set tls.cert, tls.key and tls.ca (${path}:2)`,
      );
    });

    it('certificates with an http:// server', () => {
      const cert = file('x');
      const path = file(`node_id: a\nserver: http://cp:8443\ntls:\n  cert: ${cert}\n  key: ${cert}\n`);
      expect(configErrorOf(() => loadAgentConfig({ configPath: path, env: {} })).message).toBe(
        `tls is configured but server is an http:// address; use https:// (${path}:2)`,
      );
    });

    it('a scheme other than http and https', () => {
      const path = file('node_id: a\nserver: grpc://cp:8443\n');
      expect(configErrorOf(() => loadAgentConfig({ configPath: path, env: {} })).message).toBe(
        `server "grpc://cp:8443" must be an http:// or https:// address (${path}:2)`,
      );
    });

    it('a client certificate without its key', () => {
      const cert = file('x');
      const path = file(`node_id: a\nserver: https://cp:8443\ntls:\n  cert: ${cert}\n`);
      expect(configErrorOf(() => loadAgentConfig({ configPath: path, env: {} })).message).toBe(
        `tls.key is required with tls.cert: mutual TLS needs both (${path}:4)`,
      );
    });

    it('a certificate file that is not written yet passes: the connection waits for it (issue 28)', () => {
      const path = file(`node_id: a\nserver: https://cp:8443\ntls:\n  cert: /nonexistent/c.pem\n  key: /nonexistent/k.pem\n`);
      expect(loadAgentConfig({ configPath: path, env: {} }).config.tls.cert).toBe('/nonexistent/c.pem');
    });

    it('a certificate file that cannot be read', () => {
      const path = file(`node_id: a\nserver: https://cp:8443\ntls:\n  cert: ${dir}/not-a-dir.pem/c.pem\n  key: /nonexistent/k.pem\n`);
      writeFileSync(join(dir, 'not-a-dir.pem'), 'x');
      expect(configErrorOf(() => loadAgentConfig({ configPath: path, env: {} })).message).toMatch(
        new RegExp(`^tls\\.cert: cannot read ${dir}/not-a-dir\\.pem/c\\.pem: .* \\(${path}:4\\)$`),
      );
    });

    it('reconnect_max below reconnect_base', () => {
      const path = file(`${MINIMAL}reconnect_base: 10s\nreconnect_max: 1s\n`);
      expect(configErrorOf(() => loadAgentConfig({ configPath: path, env: {} })).message).toBe(
        `reconnect_max must not be less than reconnect_base (${path}:4)`,
      );
    });
  });
});
