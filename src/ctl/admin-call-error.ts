import { AGENT_STOPPING_PREFIX } from '../lib/agent-stopping-refusal.js';
import { ExitCode, LlmgwError, failure, usageError } from '../lib/errors.js';

/** `systemctl status llmgw-agent`: what an operator runs next when the agent does not answer. */
export const AGENT_UNIT_HINT = 'systemctl status llmgw-agent';

/**
 * An error the agent answered with: a Connect code in its wire spelling
 * ("not_found") and its message. Both clients (the lean unary one and the
 * Connect one for streams) produce it, so errors are mapped in one place.
 */
export class AdminCallError extends Error {
  override readonly name = 'AdminCallError';
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export function agentUnreachable(socket: string, why: string): LlmgwError {
  return new LlmgwError('unreachable', `the agent is not running: ${why} on ${socket}; check \`${AGENT_UNIT_HINT}\` (or pass --socket / LLMGW_SOCKET if it listens elsewhere)`);
}

/**
 * What answered on `socket` is not an llmgw agent that knows `method`: another
 * program's socket (a web server's 404 page, HTTP/1.1 where the streams need
 * HTTP/2), or an agent older than this llmgw. Exit 69 as for a path that is not
 * a socket: the agent was not reached, and nothing was done.
 */
export function notTheAgent(socket: string, method: string, what: string): LlmgwError {
  return new LlmgwError(
    'unreachable',
    `what answers on ${socket} is not an llmgw agent that knows ${method} (${what}): pass the agent's admin socket with --socket / LLMGW_SOCKET or check admin.socket in the agent config; after an upgrade, restart the agent (\`${AGENT_UNIT_HINT}\`)`,
  );
}

/** The agent stopped after it took `method` and before it answered: the change may or may not have been made. */
export function wentAway(socket: string, method: string): LlmgwError {
  return new LlmgwError('unreachable', `the agent on ${socket} went away before it answered ${method}: it may or may not have been done; see \`llmgw ctl status\` once the agent is back (\`${AGENT_UNIT_HINT}\`)`);
}

/**
 * What an operator is told for an error the agent answered with. The
 * agent's messages already say what failed (an unknown shard lists the known
 * ones); the code decides the exit status.
 */
export function operatorError(err: AdminCallError, socket: string): LlmgwError {
  switch (err.code) {
    case 'invalid_argument':
      return usageError(err.message);
    case 'unavailable':
      // Refused before anything was done, and saying so: as it is (exit 69, as for an agent not running), with
      // no "went away", which would leave the operator guessing whether the change was made.
      if (err.message.startsWith(AGENT_STOPPING_PREFIX)) return new LlmgwError('unreachable', err.message);
      return new LlmgwError('unreachable', `the agent on ${socket} went away: ${err.message}; check \`${AGENT_UNIT_HINT}\``);
    case 'deadline_exceeded':
      return new LlmgwError('unreachable', `the agent on ${socket} did not answer in time (${err.message}); check \`${AGENT_UNIT_HINT}\``);
    case 'permission_denied':
      return new LlmgwError('permission', err.message);
    default:
      // not_found (an unknown shard), failed_precondition (a shard that cannot be drained), internal.
      return failure(err.message);
  }
}

export function isUnreachable(err: unknown): boolean {
  return err instanceof LlmgwError && err.exitCode === ExitCode.unreachable;
}
