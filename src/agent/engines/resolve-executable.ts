import { constants } from 'node:fs';
import { access, stat } from 'node:fs/promises';
import { delimiter, isAbsolute, join, resolve } from 'node:path';

/**
 * The file an argv[0] would execute: a name with a slash must be an
 * executable file itself; a bare name is looked up on PATH the way execvp
 * does. Undefined when nothing executable is found.
 */
export async function resolveExecutable(command: string, pathEnv = process.env.PATH ?? ''): Promise<string | undefined> {
  if (command === '') return undefined;
  const candidates = command.includes('/')
    ? [isAbsolute(command) ? command : resolve(command)]
    : pathEnv.split(delimiter).filter((d) => d !== '').map((d) => join(d, command));
  for (const file of candidates) {
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
