import { Flags } from '@oclif/core';
import { DEFAULT_ADMIN_SOCKET, DEFAULT_CONFIG_PATH } from '../agent/config/config-keys.js';
import { parseDuration } from '../lib/duration.js';
import { usageError } from '../lib/errors.js';

/** Flags every `llmgw ctl` command takes: where the agent is. */
export const ctlFlags = {
  socket: Flags.string({
    summary: `The agent's admin socket [default: admin.socket from --config, else ${DEFAULT_ADMIN_SOCKET}].`,
    env: 'LLMGW_SOCKET',
    helpGroup: 'AGENT',
  }),
  config: Flags.string({
    summary: `Agent configuration to take admin.socket (and supervisor.log_dir) from [default: ${DEFAULT_CONFIG_PATH}, if readable].`,
    helpGroup: 'AGENT',
  }),
};

/** A duration flag spelt as config spells them: 500ms, 30s, 5m. */
export const durationFlag = Flags.custom<number>({
  parse: async (text) => {
    const ms = parseDuration(text);
    if (ms === undefined) throw usageError(`${JSON.stringify(text)} is not a duration: use e.g. 30s, 5m, 1h`);
    return ms;
  },
});
