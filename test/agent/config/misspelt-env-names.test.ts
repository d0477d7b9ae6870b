import { describe, expect, it } from 'vitest';
import { describeMisspeltEnv, misspeltEnvNames } from '../../../src/agent/config/misspelt-env-names.js';

describe('misspeltEnvNames', () => {
  it('names an LLMGW_* variable one slip from a configuration variable, with the one meant', () => {
    expect(misspeltEnvNames({ LLMGW_NODEID: 'x', LLMGW_SERVR: 'y', LLMGW_SUPERVISOR_STATEDIR: '/s' })).toEqual([
      { name: 'LLMGW_NODEID', meant: 'LLMGW_NODE_ID' },
      { name: 'LLMGW_SERVR', meant: 'LLMGW_SERVER' },
      { name: 'LLMGW_SUPERVISOR_STATEDIR', meant: 'LLMGW_SUPERVISOR_STATE_DIR' },
    ]);
    expect(describeMisspeltEnv({ name: 'LLMGW_NODEID', meant: 'LLMGW_NODE_ID' })).toBe(
      'LLMGW_NODEID is not a variable the agent reads, and is ignored; did you mean LLMGW_NODE_ID?',
    );
  });

  it("leaves alone the configuration's own variables, the CLI's, oclif's, the fakes' and other programs'", () => {
    const env = {
      LLMGW_NODE_ID: 'n',
      LLMGW_SOCKET: '/s',
      LLMGW_CONFIG: '/c',
      LLMGW_JSON: 'true',
      LLMGW_COLOR: 'never',
      LLMGW_LOG_LEVEL: 'info',
      LLMGW_CONTENT_TYPE: 'json',
      LLMGW_FAKE_GPUS: 'fault',
      LLMGW_FAKE_NVIDIA_SMI_EXIT: '9',
      LLMGW_INTERNAL_RECONNECT_JITTER: 'off',
      LLMGW_SOMETHING_ELSE_ENTIRELY: '1',
      NODEID: 'x',
    };
    expect(misspeltEnvNames(env)).toEqual([]);
  });
});
