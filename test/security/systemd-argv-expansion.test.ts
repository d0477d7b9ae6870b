import { endLabFile } from '../helpers/end-lab-file.js';
import { create, toJsonString } from '@bufbuild/protobuf';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentMessageSchema, ShardState, type ShardStatus, StopShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { agentConfigYaml, agentDirs, type AgentDirs } from '../helpers/agent-config-yaml.js';
import { freePort, } from '../helpers/engine-processes.js';
import { freeFakeGpu } from '../helpers/fake-gpus.js';
import { isRegister, shardIs, simStart } from '../helpers/sim-shards.js';
import { type StartedControlPlane, startControlPlane } from '../helpers/start-control-plane.js';
import { AGENT_UNIT, agentLogDropIn, bootLab, installAgentUnit, labUnavailableReason, type SystemdLab } from '../helpers/systemd-lab.js';

/*
 * Finding N4 of security review 2, under a real systemd (the lab's, PID 1 of its own namespaces):
 * systemd substitutes `${VAR}` and a whole-word `$VAR` in a unit's ExecStart= arguments from the
 * unit's environment, and turns `$$` into `$`. With `launcher: systemd-run`, a profile arg
 * `${HF_TOKEN}` became the operator's secret from engines.<name>.env (which the control plane never
 * sees) on the engine's command line, readable by every local user, and in the log tail the
 * control plane receives. The direct launcher passes argv byte for byte; this one must too.
 *
 * The sim refuses arguments it does not know, so the bytes a live engine holds are proved through
 * the one free-text value it takes, --model (the served model name, control-plane text like the
 * args), and the profile args through a shard the sim refuses, whose log tail (oclif names the
 * unexpected arguments) is what reaches the control plane.
 */

const NODE = 'node-n4';
const S = ShardState;
const SECRET = 'hf_OPERATOR_SECRET_n4';
// biome-ignore lint/suspicious/noTemplateCurlyInString: systemd's ${VAR}, the very text under test
const BRACED = '${HF_TOKEN}';
const unavailable = await labUnavailableReason();

interface Fixture {
  lab: SystemdLab;
  cp: StartedControlPlane;
  root: string;
  dirs: AgentDirs;
}
let f: Fixture;

function agentLog(): string {
  try {
    return readFileSync(join(f.root, 'agent.log'), 'utf8');
  } catch {
    return '(no agent log)';
  }
}

/** The engine's argv as the kernel holds it, which `ps` shows every user; `pid` is the lab's. */
async function cmdlineOf(pid: number): Promise<string[]> {
  const r = await f.lab.run(['cat', `/proc/${pid}/cmdline`]);
  expect(r.exitCode, String(r.stderr)).toBe(0);
  return String(r.stdout).split('\0').slice(0, -1);
}

async function startSim(id: string, opts: { args: string[]; servedModelName?: string }, gpuSlot: number): Promise<ShardStatus> {
  const spec = simStart(id, await freePort(), { args: opts.args, gpu: freeFakeGpu(gpuSlot) });
  if (opts.servedModelName !== undefined && spec.profile) spec.profile.servedModelName = opts.servedModelName;
  const settled = f.cp.cp.waitFor(NODE, shardIs(id, S.READY, S.FAILED, S.EXITED), 30_000);
  f.cp.cp.send(NODE, { case: 'start', value: spec });
  return (await settled).msg.value as ShardStatus;
}

describe.skipIf(unavailable !== undefined)(
  unavailable ? `the systemd-run launcher passes the engine argv byte for byte (skipped: ${unavailable})` : 'the systemd-run launcher passes the engine argv byte for byte (security review 2, N4)',
  { timeout: 60_000 },
  () => {
    beforeAll(async () => {
      const root = mkdtempSync(join(tmpdir(), 'llmgw-sdargv-'));
      const lab = await bootLab({ logFile: join(root, 'systemd-lab-boot.log') });
      const cp = await startControlPlane();
      const dirs = agentDirs(root);
      f = { lab, cp, root, dirs };
      const configPath = join(root, 'agent.yaml');
      // The operator's secret, in the engine's environment (the unit's EnvironmentFile), as in the review.
      const engines = ['engines:', '  sim:', '    env:', `      HF_TOKEN: ${SECRET}`, '    extra_args: []'].join('\n');
      writeFileSync(configPath, agentConfigYaml({ server: cp.url, dirs, nodeId: NODE, supervisor: ['launcher: systemd-run'], extraYaml: engines }));
      const { installed, reloaded } = await installAgentUnit(lab, { configPath, dropIn: agentLogDropIn(join(root, 'agent.log')) });
      expect(installed.exitCode, String(installed.stderr)).toBe(0);
      expect(reloaded.exitCode).toBe(0);
      const registered = f.cp.cp.waitFor(NODE, isRegister, 30_000);
      const started = await lab.run(['systemctl', 'start', AGENT_UNIT], { timeoutMs: 60_000 });
      expect(started.exitCode, `${String(started.stderr)}\n${agentLog()}`).toBe(0);
      await registered;
    }, 60_000);

    afterAll(() => endLabFile(f));

    it(`a READY engine holds exactly the bytes the control plane sent: ${BRACED} not substituted, $$ not halved, %n not a specifier`, async () => {
      const name = `a${BRACED}b$$c%n%%d$`;
      // The command line as soon as the engine runs: an engine that got other bytes serves another name and never becomes READY.
      const launched = f.cp.cp.waitFor(NODE, (m) => m.msg.case === 'shard' && m.msg.value.shardId === 'n4-live' && m.msg.value.pid > 0, 30_000);
      const ready = startSim('n4-live', { args: ['--load-time', '1s'], servedModelName: name }, 0);
      ready.catch(() => {});
      const argv = await cmdlineOf(((await launched).msg.value as ShardStatus).pid);
      expect(argv.slice(argv.indexOf('--model'), argv.indexOf('--model') + 2)).toEqual(['--model', name]);
      expect(argv.slice(-2)).toEqual(['--load-time', '1s']);
      expect(argv.join('\0')).not.toContain(SECRET);
      const st = await ready;
      expect(S[st.state], `${st.error}\n${agentLog()}`).toBe('READY');
      // The sim prints its args at start, as vLLM prints its non-default ones: the literal, never the value.
      const log = readFileSync(join(f.dirs.logDir, 'shards', 'n4-live.log'), 'utf8');
      expect(log).toContain(`model=${name} `);
      expect(log).not.toContain(SECRET);

      const stopped = f.cp.cp.waitFor(NODE, shardIs('n4-live', S.STOPPED, S.FAILED), 30_000);
      f.cp.cp.send(NODE, { case: 'stop', value: create(StopShardSchema, { shardId: 'n4-live' }) });
      expect(S[((await stopped).msg.value as ShardStatus).state]).toBe('STOPPED');
    });

    it(`profile args ${BRACED}, $HF_TOKEN, $$ and %n reach the engine as sent: the log tail reported upstream names them, and no report or log holds the secret`, async () => {
      const args = ['--load-time', '200ms', `x${BRACED}`, '$HF_TOKEN', '$$', '%n'];
      const st = await startSim('n4-args', { args }, 1);
      expect(S[st.state], agentLog()).toBe('FAILED');
      // oclif's refusal, as the engine printed it and the control plane received it.
      const tail = st.lastOutput.join('\n');
      expect(tail).toContain(`Unexpected arguments: x${BRACED}, $HF_TOKEN, $$, %n`);

      const said = [...f.cp.cp.messages(NODE).map((m) => toJsonString(AgentMessageSchema, m)), readFileSync(join(f.dirs.logDir, 'shards', 'n4-args.log'), 'utf8'), agentLog()].join('\n');
      expect(said).not.toContain(SECRET);
      // The agent outlived both engines.
      expect((await f.lab.run(['systemctl', 'is-active', AGENT_UNIT])).stdout).toBe('active');
    });
  },
);
