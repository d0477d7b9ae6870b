import { Flags } from '@oclif/core';
import { type ExampleAgentConfig, exampleAgentConfig } from '../../agent/install/example-agent-config.js';
import { BaseCommand } from '../../cli/base-command.js';

export default class AgentExampleConfig extends BaseCommand {
  static override summary = 'Print the example agent configuration, every key documented, from the installed package.';

  static override description = [
    "The installed package's examples/agent.yaml (in $(npm root -g)/llmgw/examples/), for a node that has only the package: print it, or write it (mode 0640) with --output.",
    'An existing file is never replaced without --force: it is likely a configuration someone edited.',
  ].join('\n\n');

  static override examples = [
    '<%= config.bin %> agent example-config --output /etc/llmgw/agent.yaml',
    '<%= config.bin %> agent example-config | less',
    '<%= config.bin %> agent example-config --json | jq -r .source',
  ];

  static override flags = {
    output: Flags.string({ char: 'o', summary: 'Write it to this file (mode 0640) instead of printing it; - prints it.' }),
    force: Flags.boolean({ summary: 'Replace an existing --output file.', dependsOn: ['output'] }),
  };

  async run(): Promise<Omit<ExampleAgentConfig, 'text'> & { text?: string }> {
    const { flags } = await this.parse(AgentExampleConfig);
    const example = await exampleAgentConfig({ output: flags.output, force: flags.force });
    if (this.jsonEnabled()) return example.path === undefined ? example : { source: example.source, path: example.path };
    if (example.path === undefined) process.stdout.write(example.text);
    else this.log(`wrote ${example.path} (from ${example.source}); edit node_id, server and fabrics`);
    return example;
  }
}
