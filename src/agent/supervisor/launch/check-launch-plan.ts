import { usageError } from '../../../lib/errors.js';
import type { LaunchPlan } from '../../engines/launch-plan.js';

/**
 * Most arguments an engine command may have. A real vLLM or SGLang command
 * line has a few dozen; thousands are a broken profile, which the engine
 * would refuse only after it was launched (and reported STARTING).
 */
export const MAX_ENGINE_ARGS = 4096;
/** Linux's MAX_ARG_STRLEN: execve() refuses any one argument or NAME=value longer than this (NUL included). */
export const MAX_ARG_STRLEN = 32 * 4096;
/**
 * What argv and the environment together may take: execve() fails with
 * E2BIG above a quarter of the stack limit, 2 MiB with the usual 8 MiB.
 * Checked with room to spare, since the real limit depends on the rlimit.
 */
export const MAX_EXEC_BYTES = 2 * 1024 * 1024 - 64 * 1024;

/**
 * Refuses a plan that execve() would refuse (E2BIG) or that no engine
 * means, naming the argument or variable at fault. Without it a 1 MiB env
 * value surfaced as a bare "spawn E2BIG", and 10,000 arguments launched an
 * engine that died on them.
 *
 * @param env the engine's whole environment (the agent's, inherited, plus the plan's)
 */
export function checkLaunchPlan(plan: LaunchPlan, env: Record<string, string>): void {
  const args = plan.argv.length - 1;
  if (args > MAX_ENGINE_ARGS) {
    throw usageError(`the engine command has ${args} arguments; at most ${MAX_ENGINE_ARGS} are accepted (check the profile's args)`);
  }
  let total = 0;
  for (const [i, arg] of plan.argv.entries()) {
    const bytes = Buffer.byteLength(arg) + 1;
    if (bytes > MAX_ARG_STRLEN) {
      throw usageError(`engine argument ${i} is ${bytes - 1} bytes; the kernel takes at most ${MAX_ARG_STRLEN - 1} per argument`);
    }
    total += bytes + 8;
  }
  for (const [key, value] of Object.entries(env)) {
    const bytes = Buffer.byteLength(key) + 1 + Buffer.byteLength(value) + 1;
    if (bytes > MAX_ARG_STRLEN) {
      throw usageError(
        `environment variable ${key} is ${Buffer.byteLength(value)} bytes; the kernel takes at most ${MAX_ARG_STRLEN - 2 - Buffer.byteLength(key)} for it (MAX_ARG_STRLEN)`,
      );
    }
    total += bytes + 8;
  }
  if (total > MAX_EXEC_BYTES) {
    throw usageError(`the engine's arguments and environment take ${total} bytes; at most ${MAX_EXEC_BYTES} fit in one exec`);
  }
}
