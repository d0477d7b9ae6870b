import { describe, expect, it } from 'vitest';
import { explainEngineExit } from '../../../src/agent/engines/explain-engine-exit.js';

describe('explainEngineExit', () => {
  it('names the vLLM version that lacks --shutdown-timeout when argparse refuses it', () => {
    const out = ['usage: vllm serve [model_tag] [options]', 'vllm serve: error: unrecognized arguments: --shutdown-timeout 25'];
    expect(explainEngineExit(out)).toBe('vLLM older than 0.18 has no --shutdown-timeout, which the agent passes so that a stop drains; use vLLM 0.18 or newer');
  });
  it("names the arguments an engine did not know when they are not the agent's", () => {
    const out = ['launch_server.py: error: unrecognized arguments: --no-such-flag=3 --other'];
    expect(explainEngineExit(out)).toBe("the engine does not know --no-such-flag --other: check the profile's args and engines.<name>.extra_args against its version");
  });
  it('says nothing of an engine that died for another reason', () => {
    expect(explainEngineExit(['RuntimeError: CUDA error: out of memory'])).toBeUndefined();
    expect(explainEngineExit([])).toBeUndefined();
  });
});
