import { Flags } from '@oclif/core';
import { DEFAULT_ADMIN_SOCKET, DEFAULT_CONFIG_PATH } from '../lib/default-paths.js';

/** Flags every `llmgw ctl` command takes: where the agent is. */
export const ctlFlags = {
  socket: Flags.string({
    summary: `The agent's admin socket [default: admin.socket from --config, else ${DEFAULT_ADMIN_SOCKET}].`,
    env: 'LLMGW_SOCKET',
    helpGroup: 'AGENT',
  }),
  config: Flags.string({
    summary: `Agent configuration to take admin.socket (and supervisor.log_dir) from [default: ${DEFAULT_CONFIG_PATH}, if readable].`,
    env: 'LLMGW_CONFIG',
    helpGroup: 'AGENT',
  }),
};
