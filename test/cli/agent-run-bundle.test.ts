import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import { startAgentProcess, tempAgentDirs } from '../helpers/agent-process.js';
import { freePort } from '../helpers/engine-processes.js';
import { REPO_ROOT, runCli } from '../helpers/run-cli.js';
import { isRegister, shardIs, simStart } from '../helpers/sim-shards.js';
import { startControlPlane } from '../helpers/start-control-plane.js';

/**
 * The bundle `agent run` starts from (scripts/bundle-agent-run.mjs, built by
 * `npm run build`). What it imports from outside itself at the top level is
 * loaded at every agent start, before Register, whatever the agent uses.
 */
const bundle = readFileSync(join(REPO_ROOT, 'dist/agent-run.bundle.js'), 'utf8');

/** The packages (not node: builtins) the bundle imports statically, which load with it. */
function staticImports(text: string): string[] {
  const found = new Set<string>();
  // The bundle is built without whitespace: `import{a as b}from"x";`, `import*as y from"x";`, `import"x";`.
  for (const m of text.matchAll(/(?:^|[;}\n])import\s*(?:[{*\w][^;("']*?from\s*)?"([^"]+)"/g)) {
    const spec = m[1] as string;
    if (!spec.startsWith('node:')) found.add(spec);
  }
  return [...found].sort();
}

describe('the agent-run bundle', () => {
  it('loads no package at start but koffi (NVML, tried at every start): prom-client only with metrics_addr', () => {
    // prom-client, imported by the lazily loaded metrics module, was hoisted
    // to the bundle's top: ~60 ms of every start, with no metrics asked for.
    expect(staticImports(bundle)).toEqual(['koffi']);
  });

  it('carries execa itself, so the nvidia-smi run right after Register loads no module files', () => {
    // Loaded from node_modules it took 140–240 ms of the main thread just
    // when adopted shards report READY and a death must reach the stream.
    expect(bundle).not.toMatch(/import\(\s*"execa"\s*\)/);
    expect(staticImports(bundle)).not.toContain('execa');
    // execa's own error wording: its code is in the bundle, not loaded beside it.
    expect(bundle).toContain('Command failed with');
  });
});

/** test/fixtures/undici-tripwire.cjs: what a process preloaded with it wrote at exit. */
interface Tripwire {
  undici: boolean;
  touched: { name: string; stack: string }[];
}
const TRIPWIRE = join(REPO_ROOT, 'test/fixtures/undici-tripwire.cjs');

function tripwireDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-tripwire-'));
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function nodeWithTripwire(code: string): Tripwire {
  const dir = tripwireDir();
  const r = spawnSync(process.execPath, ['--require', TRIPWIRE, '-e', code], { env: { ...process.env, LLMGW_TRIPWIRE_DIR: dir }, encoding: 'utf8', timeout: 30_000 });
  expect(r.status, r.stderr).toBe(0);
  return JSON.parse(readFileSync(join(dir, `${r.pid}.json`), 'utf8'));
}

describe("the agent-run bundle's Headers", () => {
  // connect-es makes a Headers for every call; the global one loads all of
  // undici on first use, ~6 MB of the steady agent's RSS (bench figure 5a).
  // The bundle carries src/lib/web-headers.ts in its place.
  it.each(['connect', 'grpc'] as const)('leaves undici unloaded through Register, a shard to READY, heartbeats, ctl status and a clean stop (%s)', async (protocol) => {
    const { cp, url } = await startControlPlane();
    const dirs = tempAgentDirs('llmgw-no-undici-');
    const out = tripwireDir();
    const agent = startAgentProcess({ server: url, dirs, protocol, heartbeat: '100ms', env: { NODE_OPTIONS: `--require ${TRIPWIRE}`, LLMGW_TRIPWIRE_DIR: out } });
    await cp.waitFor('node-a', isRegister, 30_000);
    const ready = cp.waitFor('node-a', shardIs('s0', ShardState.READY), 30_000);
    cp.send('node-a', { case: 'start', value: simStart('s0', await freePort()) });
    await ready;
    let beats = 0;
    await cp.waitFor('node-a', (m) => m.msg.case === 'heartbeat' && ++beats >= 5, 30_000);
    // The admin socket's server side (connect's universal handler) makes Headers too.
    const status = JSON.parse((await runCli(['ctl', 'status', '--json', '--socket', dirs.socket])).stdout);
    expect(status.shards.map((s: { shardId: string }) => s.shardId)).toEqual(['s0']);
    agent.kill('SIGTERM');
    await agent.exited;
    const seen: Tripwire = JSON.parse(readFileSync(join(out, `${agent.pid}.json`), 'utf8'));
    expect(seen.touched.map((t) => `${t.name}: ${t.stack}`)).toEqual([]);
    expect(seen.undici).toBe(false);
  }, 90_000);

  it("(the tripwire's look-alikes) sees a process that makes a Headers load undici, and one that does not leave it unloaded", () => {
    const made = nodeWithTripwire('new Headers({ a: "1" })');
    expect(made.undici).toBe(true);
    expect(made.touched.map((t) => t.name)).toEqual(['Headers']);
    expect(nodeWithTripwire('require("node:http2"); require("node:stream")')).toEqual({ undici: false, touched: [] });
  });
});
