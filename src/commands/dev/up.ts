import { Flags } from '@oclif/core';
import { BaseCommand } from '../../cli/base-command.js';
import { durationFlag } from '../../cli/duration-flags.js';
import { DEV_RETRY_BACKOFF_MS } from '../../dev/dev-cluster.js';
import { DEV_ENGINES } from '../../dev/dev-deployment-yaml.js';
import { renderDevUpSummary } from '../../dev/render-dev-up-summary.js';
import { type DevUpRenderer, runDevUp } from '../../dev/run-dev-up.js';
import { formatDuration } from '../../lib/duration.js';
import { usageError } from '../../lib/errors.js';

export default class DevUp extends BaseCommand {
  static override summary = 'Run a whole llmgw cluster on this machine: the reference control plane, one agent, sim engines.';

  static override description = `Starts the reference control plane on 127.0.0.1 with a deployment of
--replicas sim replicas (one GPU each) or --deployment FILE, and one real
agent (llmgw agent run) as a child process with temporary state, log and
socket directories. Without NVIDIA GPUs the agent discovers a fake 8-GPU box
(bin/fake-nvidia-smi, LLMGW_FAKE_GPUS=hgx-h100x8); the output says which.
LLMGW_FAKE_GPUS=<data set> (fixtures/gpu: pcie-l40sx4, fault, …) gives it
another fake box, even on a machine with GPUs.

It prints the temporary directory and the log paths first. A replica not
ready after a few seconds is described on stderr: its phase, its shards'
states and the last lines of its engine's log, again whenever they change.
Once every replica is ready it prints each replica's URL, a curl line for a
chat completion, the llmgw ctl commands to try (with the agent's --socket)
and where the logs are, then keeps reporting until Ctrl-C: a replica placed
again on another port gets its new URL and curl line, each engine failure
its exit status, a crash loop its own line.

Ctrl-C (SIGINT or SIGTERM) stops every shard through the control plane, then
the agent, kills any engine still recorded in the state directory: nothing
is left running. The temporary directory is removed only after a run that
got to ready and stopped cleanly; it is kept (and the output says where)
with --keep, when anything failed, or when Ctrl-C came before every replica
was ready, since the engine's log is then what explains the hang. A second
Ctrl-C kills at once. --log-level sets the level of the agent's and control
plane's log files; progress goes to stderr, the summary to stdout.

With --json, stdout carries exactly one JSON object, written once every
replica is ready, and nothing else (later reports go to stderr). A script
waits for it like this:
  llmgw dev up --json > dev.json &
  until jq -e .replicas dev.json >/dev/null 2>&1; do sleep 0.2; done
  url=$(jq -r '.replicas[0].url' dev.json)

The control plane here is a reference for local runs, demos and tests,
NOT the production control plane. Production runs the llmgw control plane,
a separate service that speaks the same contract.`;

  static override examples = [
    { description: 'One sim replica; prints its URL and a curl line once it answers.', command: '<%= config.bin %> dev up' },
    { description: 'Three replicas on three (fake or real) GPUs, control plane on a fixed port.', command: '<%= config.bin %> dev up --replicas 3 --port 8443' },
    { description: 'Warm starts and sleep: the vLLM double, its model prefetched into the page cache; then try llmgw ctl sleep and ctl wake.', command: '<%= config.bin %> dev up --engine vllm' },
    { description: 'Your own deployment (one node; see examples/deployment.yaml); keep the logs afterwards.', command: '<%= config.bin %> dev up --deployment examples/deployment.yaml --keep' },
    { description: 'For scripts: one JSON object (URLs, socket, log paths) once ready; see the description for how to wait for it.', command: '<%= config.bin %> dev up --json > dev.json &' },
  ];

  static override flags = {
    replicas: Flags.integer({ char: 'n', summary: 'Sim replicas to run, one GPU each [default: 1].', min: 1 }),
    engine: Flags.option({
      options: DEV_ENGINES,
      summary: "Engine of the generated deployment: sim, or vllm (the vLLM double, bin/fake-vllm: its model pulled from dev up's own hub into the node's store and page cache before it starts, sleep mode on for ctl sleep / ctl wake).",
      default: 'sim' as const,
    })(),
    deployment: Flags.string({ char: 'd', summary: 'Deployment YAML to run instead of the generated one (replicas of one node only).' }),
    port: Flags.integer({ summary: 'Control-plane port on 127.0.0.1 [default: a free one].', min: 0, max: 65535, default: 0 }),
    keep: Flags.boolean({ summary: 'Keep the temporary directory (state, logs, configuration) after stopping.' }),
    'retry-backoff': durationFlag({
      summary: `Wait before placing a failed replica again, doubling while it keeps failing [default: ${formatDuration(DEV_RETRY_BACKOFF_MS)}].`,
    }),
  };

  async run(): Promise<void> {
    const { flags } = await this.parse(DevUp);
    if (flags.deployment !== undefined && flags.replicas !== undefined) {
      throw usageError('--replicas and --deployment exclude each other: the deployment says how many replicas run');
    }
    const json = this.jsonEnabled();
    const renderer: DevUpRenderer = json ? 'silent' : process.stderr.isTTY ? 'default' : 'simple';
    await runDevUp({
      replicas: flags.replicas ?? 1,
      engine: flags.engine,
      deploymentFile: flags.deployment,
      port: flags.port,
      keep: flags.keep,
      ...(flags['retry-backoff'] !== undefined ? { retryBackoffMs: flags['retry-backoff'] } : {}),
      logLevel: flags['log-level'] ?? 'info',
      renderer,
      onReady: (summary) => (json ? this.logJson(summary) : this.log(renderDevUpSummary(summary))),
      onProgress: (line) => process.stderr.write(`${line}\n`),
      // stdout carries exactly the one JSON object with --json; a script reading it must not meet text after it.
      onUpdate: (line) => (json ? process.stderr.write(`${line}\n`) : this.log(line)),
    });
    // Stopped in order; an HTTP/2 session the control plane has not yet
    // destroyed must not hold the process (and the terminal) past that.
    this.exit(0);
  }
}
