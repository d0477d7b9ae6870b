import { describe, expect, it } from 'vitest';
import { AdminCallError, operatorError } from '../../src/ctl/admin-call-error.js';
import { agentStoppingRefusal } from '../../src/lib/agent-stopping-refusal.js';

const SOCKET = '/run/llmgw/agent.sock';

describe('operatorError', () => {
  it('prints a write refused while the agent stops as the agent said it, exit 69', () => {
    const err = operatorError(new AdminCallError('unavailable', agentStoppingRefusal('Drain')), SOCKET);
    expect([err.exitCode, err.message]).toEqual([69, 'the agent is stopping: Drain refused, nothing was changed; try again after it restarts']);
  });

  it('still says "went away" for an agent that stopped in the middle of a call, where nobody can say what was done', () => {
    // What AdminServer.close() aborts a call in progress with: not the refusal, whose words say nothing changed.
    const err = operatorError(new AdminCallError('unavailable', 'the agent is stopping'), SOCKET);
    expect(err.exitCode).toBe(69);
    expect(err.message).toBe(`the agent on ${SOCKET} went away: the agent is stopping; check \`systemctl status llmgw-agent\``);
  });
});
