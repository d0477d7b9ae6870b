import { lstat, realpath } from 'node:fs/promises';
import { resolve, sep } from 'node:path';
import { describeErrno } from '../../lib/errno.js';

/**
 * A Hugging Face repo id as huggingface_hub's validate_repo_id takes one:
 * `name` or `org/name`, each of word characters (Python's Unicode \w),
 * `.` and `-`, beginning and ending with a word character, at most 96; no
 * `--` or `..` anywhere.
 */
const HUB_SEGMENT = String.raw`[\p{L}\p{N}\p{M}_](?:[\p{L}\p{N}\p{M}_.-]{0,94}[\p{L}\p{N}\p{M}_])?`;
const HUB_REPO_ID = new RegExp(`^(?!.*(?:--|\\.\\.))(?:${HUB_SEGMENT}/)?${HUB_SEGMENT}$`, 'u');

/**
 * Where an engine resolves a relative name: the agent's working directory
 * (the direct launcher sets none, so the engine inherits it) and `/`
 * (systemd's default for a transient unit, and the agent's own under its
 * unit). vLLM and SGLang take a model that exists on disk as a local folder
 * before asking the hub, so `etc` or `usr/share` from `/` is a local path
 * though it reads like a repo id.
 */
function engineWorkingDirs(): string[] {
  return [...new Set([process.cwd(), '/'])];
}

async function exists(path: string): Promise<boolean> {
  try {
    await lstat(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * Undefined when `value` may be handed to an engine as a model (or
 * tokenizer, config) reference; else why not, as a phrase that follows the
 * value ("… is a local path, …"). A hub repo id that names nothing on this
 * node passes. Anything else is a local path: it must resolve, through
 * symlinks and `..` (realpath), to a directory under one of `roots`, each
 * resolved the same way, so a symlink under a root cannot lead out of it.
 * `engine` names the key in the messages (engines.<engine>.model_roots).
 */
export async function checkModelPath(value: string, roots: readonly string[], engine: string): Promise<string | undefined> {
  const key = `engines.${engine}.model_roots`;
  const dirs = engineWorkingDirs();
  if (HUB_REPO_ID.test(value)) {
    const found = await Promise.all(dirs.map((d) => exists(resolve(d, value))));
    if (!found.includes(true)) return undefined;
  }
  const kind = value.startsWith('~') ? 'a local path (the engine does not expand ~)' : 'a local path, not a hub repo id (org/name),';
  if (roots.length === 0) return `is ${kind} and ${key} is empty; use a hub repo id, or list the directory that holds it in ${key}`;
  const realRoots = (await Promise.all(roots.map((r) => realpath(r).catch(() => undefined)))).filter((r) => r !== undefined);
  let real: string;
  try {
    real = await realpath(resolve(dirs[0] as string, value));
  } catch (err) {
    return `is ${kind} that cannot be resolved on this node (${describeErrno(err)}); a local model must be under ${key} (${roots.join(', ')})`;
  }
  const inside = realRoots.some((r) => real === r || real.startsWith(r.endsWith(sep) ? r : `${r}${sep}`));
  if (inside) return undefined;
  return `is ${kind} that resolves to ${JSON.stringify(real)}, outside ${key} (${roots.join(', ')})`;
}
