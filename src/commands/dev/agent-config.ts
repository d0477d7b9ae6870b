import { Flags } from '@oclif/core';
import { BaseCommand } from '../../cli/base-command.js';
import { cliInvocation } from '../../dev/dev-up-summary.js';
import { describeGpuSource, findGpuSource } from '../../dev/find-gpu-source.js';
import { type DevAgentConfigFiles, writeDevAgentConfig } from '../../dev/write-dev-agent-config.js';

export default class DevAgentConfig extends BaseCommand {
  static override summary = 'Write the configuration of one of several agents on this machine, for llmgw dev control-plane.';

  static override description = `Writes DIR/agent.yaml for an agent with its own node id and its own state,
log and socket paths under DIR, pointed at --server: the configuration dev up
gives its agent. On a machine without NVIDIA GPUs it uses the fake 8-GPU box
(bin/fake-nvidia-smi and its sysfs tree), so the agent has GPUs to place on;
mgmt_interface is lo, so the URL the control plane publishes for a replica
(http://127.0.0.1:PORT) is where the sim engine listens.

Several agents on one machine each need their own --node-id and --dir: the
control plane refuses a second agent with a node id that is connected, and
agents sharing a state directory would adopt each other's engines.`;

  static override examples = [
    {
      description: 'Two agents for one control plane (see docs/local-cluster.md, "Several agents on one machine").',
      command: '<%= config.bin %> dev agent-config --node-id gpu-node-01 --dir /tmp/llmgw-ma/a1 --server http://127.0.0.1:8443',
    },
    { description: 'The paths it wrote, for a script.', command: '<%= config.bin %> dev agent-config --node-id gpu-node-02 --dir /tmp/llmgw-ma/a2 --json' },
  ];

  static override flags = {
    'node-id': Flags.string({ summary: "The agent's node_id; unique among the agents of one control plane.", required: true }),
    dir: Flags.string({ summary: 'Directory for agent.yaml, state, logs and the admin socket (created, mode 0700).', required: true }),
    server: Flags.string({ summary: 'The control plane the agent connects to.', default: 'http://127.0.0.1:8443' }),
  };

  async run(): Promise<DevAgentConfigFiles> {
    const { flags } = await this.parse(DevAgentConfig);
    const gpus = await findGpuSource();
    const files = writeDevAgentConfig({ nodeId: flags['node-id'], server: flags.server, dir: flags.dir, gpus, logLevel: flags['log-level'] ?? 'info' });
    this.log(`wrote ${files.config}: node ${files.nodeId}, ${describeGpuSource(gpus)}`);
    this.log(`start it with: ${cliInvocation()} agent run --config ${files.config}`);
    this.log(`ask it with:   ${cliInvocation()} ctl status --socket ${files.socket}`);
    return files;
  }
}
