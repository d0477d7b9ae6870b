import { accessSync, constants, statSync } from 'node:fs';
import { access, stat } from 'node:fs/promises';
import { delimiter, isAbsolute, join, resolve } from 'node:path';

function candidates(command: string, pathEnv: string): string[] {
  if (command.includes('/')) return [isAbsolute(command) ? command : resolve(command)];
  return pathEnv
    .split(delimiter)
    // An empty or relative PATH entry means "the current directory" to execvp:
    // whatever directory the agent happens to run in would choose the engine.
    .filter((d) => d !== '' && isAbsolute(d))
    .map((d) => join(d, command));
}

/**
 * The absolute file an argv[0] would execute: a name with a slash must be an
 * executable file itself; a bare name is looked up on PATH the way execvp
 * does (the agent's PATH, never a profile's). Undefined when nothing
 * executable is found.
 */
export async function resolveExecutable(command: string, pathEnv = process.env.PATH ?? ''): Promise<string | undefined> {
  if (command === '') return undefined;
  for (const file of candidates(command, pathEnv)) {
    try {
      if (!(await stat(file)).isFile()) continue;
      await access(file, constants.X_OK);
      return file;
    } catch {
      // Not here; try the next PATH entry.
    }
  }
  return undefined;
}

/** resolveExecutable for callers that cannot await (building a launch plan). */
export function resolveExecutableSync(command: string, pathEnv = process.env.PATH ?? ''): string | undefined {
  if (command === '') return undefined;
  for (const file of candidates(command, pathEnv)) {
    try {
      if (!statSync(file).isFile()) continue;
      accessSync(file, constants.X_OK);
      return file;
    } catch {
      // Not here; try the next PATH entry.
    }
  }
  return undefined;
}
