import { BaseCommand } from '../../cli/base-command.js';
import { storedCtlPaths } from '../../cli/cli-preferences.js';
import { ctlFlags } from '../../cli/ctl-flags.js';

export default class CtlAdopt extends BaseCommand {
  static override summary = 'Rescan the state directory now and take back engines nobody supervises.';

  static override description = `The agent does this at every start; run it after restoring a state file, or to
see what the state directory describes. One line per engine: adopted (alive
and identified; supervised again and reported to the control plane), killed
(alive but unidentifiable: a process holding GPUs that nothing can describe),
cleaned (its process was gone; the state file is removed) or already
supervised. --json prints the AdoptResponse as proto JSON.`;

  static override examples = ['<%= config.bin %> ctl adopt', '<%= config.bin %> ctl adopt --json | jq \'.results[] | select(.outcome == "ADOPT_OUTCOME_KILLED")\''];

  static override flags = { ...ctlFlags };

  async run(): Promise<unknown> {
    const { flags } = await this.parse(CtlAdopt);
    const { resolveCtlPaths } = await import('../../ctl/resolve-ctl-paths.js');
    const { ctlAdopt } = await import('../../ctl/ctl-adopt.js');
    const { socket } = await resolveCtlPaths({ socket: flags.socket, configPath: flags.config, stored: storedCtlPaths(this.preferences) });
    const response = await ctlAdopt(socket);
    if (this.jsonEnabled()) return response;
    const { renderAdoptResults } = await import('../../ctl/render-adopt-results.js');
    this.log(renderAdoptResults(response.results ?? []));
    return response;
  }
}
