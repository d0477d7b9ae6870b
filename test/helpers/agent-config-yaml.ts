import { join } from 'node:path';
import { isMap, parseDocument } from 'yaml';
import { REPO_ROOT } from './run-cli.js';
import { ENGINE_NAMES } from '../../src/lib/engine-names.js';

/*
 * The test agent's configuration, free of vitest so that the fault campaign's
 * soak driver (plain tsx, no test runner) builds agents exactly as tests do.
 */

export const FAKE_NVIDIA_SMI = join(REPO_ROOT, 'bin/fake-nvidia-smi');
export const FIXTURE_SYSFS = join(REPO_ROOT, 'fixtures/sysfs/hgx-h100x8');

export interface AgentDirs {
  root: string;
  stateDir: string;
  logDir: string;
  socket: string;
}

export function agentDirs(root: string): AgentDirs {
  return { root, stateDir: join(root, 'state'), logDir: join(root, 'log'), socket: join(root, 'agent.sock') };
}

export interface AgentProcessOptions {
  server: string;
  dirs: AgentDirs;
  nodeId?: string;
  protocol?: 'connect' | 'grpc';
  /** More YAML appended to the generated config (top-level keys not set below). */
  extraYaml?: string;
  env?: Record<string, string>;
  heartbeat?: string;
  /**
   * register_timeout; 0s (the product's default: a stream is kept however long the control plane is silent) unless
   * a test is about a silent control plane. At 2s, every test agent dropped its stream whenever the control plane
   * in the loaded vitest worker took over 2 s to ack Register, and re-registered: the test had its Register from the
   * first stream and sent its next command there, to be lost (a prefetch never pulled, 30 s later a timeout); and the
   * security tests' hostile control plane, which acks nothing, had its stream dropped every 2 s, a command sent in
   * the gap to the next one lost likewise.
   */
  registerTimeout?: string;
  /** discovery.interval; long by default so tests see one inventory. */
  discoveryInterval?: string;
  /** engines.sim.enabled; true by default, false to see the agent as a production node. */
  simEnabled?: boolean;
  /** discovery.foreign_memory_share; the default (5%) refuses the fake box's GPUs 3 and 4. */
  foreignMemoryShare?: string;
  /** discovery.nvidia_smi; bin/fake-nvidia-smi by default. */
  nvidiaSmi?: string;
  /** discovery.nvml_library (test/agent/discovery/fake-nvml.ts builds one); none by default. */
  nvmlLibrary?: string;
  /** More supervisor keys, as YAML lines without their indent (`stall_timeout: 5s`). */
  supervisor?: string[];
  /**
   * engines.<name>.allow_root: true on every engine with no user (the
   * default): the suite runs as root, where an engine with neither is
   * refused. False leaves the engines as written, to see that refusal.
   */
  allowRoot?: boolean;
}

/** The engines block every test agent has: the sim, which production nodes do not register, enabled. */
export const TEST_ENGINES_YAML = 'engines:\n  sim:\n    enabled: true\n';

/**
 * `extra` with engines.sim.enabled: true merged in. A test that brings its
 * own engines: block (a vLLM fixture) keeps it, since YAML refuses a second
 * top-level engines key.
 */
export function withSimEnabled(extra: string): string {
  if (!/^engines:/m.test(extra)) return `${TEST_ENGINES_YAML}${extra}`;
  if (/^ {2}sim:\s*\n/m.test(extra)) return extra.replace(/^ {2}sim:\s*\n/m, '  sim:\n    enabled: true\n');
  return extra.replace(/^engines:\s*\n/m, 'engines:\n  sim:\n    enabled: true\n');
}

/**
 * `yaml` with engines.<name>.allow_root: true for each engine that sets
 * neither a user nor allow_root itself, as a root test agent needs to start
 * engines at all.
 */
export function withRootEngines(yaml: string): string {
  const doc = parseDocument(yaml);
  for (const name of ENGINE_NAMES) {
    const engine = doc.getIn(['engines', name]);
    if (isMap(engine) && ((engine.get('user') ?? '') !== '' || engine.has('allow_root'))) continue;
    if (engine !== undefined && engine !== null && !isMap(engine)) continue;
    doc.setIn(['engines', name, 'allow_root'], true);
  }
  return doc.toString();
}

/** The config a test agent runs with: fast timers, fake GPUs, the sim engine, everything under `dirs`. */
export function agentConfigYaml(o: AgentProcessOptions): string {
  const yaml = agentConfigLines(o);
  return o.allowRoot === false ? yaml : withRootEngines(yaml);
}

function agentConfigLines(o: AgentProcessOptions): string {
  return [
    `node_id: ${o.nodeId ?? 'node-a'}`,
    `server: ${o.server}`,
    `protocol: ${o.protocol ?? 'connect'}`,
    `heartbeat_interval: ${o.heartbeat ?? '200ms'}`,
    'reconnect_base: 100ms',
    'reconnect_max: 1s',
    `register_timeout: ${o.registerTimeout ?? '0s'}`,
    'adopt_ready_timeout: 20s',
    'mgmt_interface: lo',
    'discovery:',
    `  nvidia_smi: ${o.nvidiaSmi ?? FAKE_NVIDIA_SMI}`,
    ...(o.nvmlLibrary ? [`  nvml_library: ${o.nvmlLibrary}`] : []),
    `  sysfs_root: ${FIXTURE_SYSFS}`,
    '  timeout: 5s',
    `  interval: ${o.discoveryInterval ?? '60s'}`,
    ...(o.foreignMemoryShare ? [`  foreign_memory_share: ${o.foreignMemoryShare}`] : []),
    'supervisor:',
    `  state_dir: ${o.dirs.stateDir}`,
    `  log_dir: ${o.dirs.logDir}`,
    '  stop_grace: 3s',
    '  worker_settle: 1s',
    '  health_interval: 500ms',
    ...(o.supervisor ?? []).map((line) => `  ${line}`),
    'admin:',
    `  socket: ${o.dirs.socket}`,
    'log_level: debug',
    o.simEnabled === false ? (o.extraYaml ?? '') : withSimEnabled(o.extraYaml ?? ''),
  ].join('\n');
}

