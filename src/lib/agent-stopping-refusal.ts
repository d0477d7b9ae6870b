/**
 * How an admin write refused while the agent stops begins. The agent writes
 * it (admin-stopping-gate.ts) and ctl reads it (admin-call-error.ts), to tell
 * "refused, nothing changed" apart from an agent that went away in the middle
 * of a call, where nobody can say what was done.
 */
export const AGENT_STOPPING_PREFIX = 'the agent is stopping: ';

/** The one line for a write (`method`, as AdminService names it) refused while the agent stops. */
export function agentStoppingRefusal(method: string): string {
  return `${AGENT_STOPPING_PREFIX}${method} refused, nothing was changed; try again after it restarts`;
}
