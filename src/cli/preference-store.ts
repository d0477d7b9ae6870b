import { join } from 'node:path';
import { configError, errorMessage } from '../lib/errors.js';
import { type PreferenceKey, type PreferenceValue, preferencesDir } from './cli-preferences.js';

/**
 * Writes the operator's preferences through `conf` (atomic writes, the XDG
 * directory created as needed). Only `llmgw config set|unset` loads it:
 * reading goes through cli-preferences.ts, which the ctl fast path can afford.
 */
async function openStore(env: NodeJS.ProcessEnv) {
  // A file that is not JSON makes conf throw (it never clears it: clearInvalidConfig is off), so
  // nothing is lost; a bad value in good JSON is what `config set` is there to repair.
  const { default: Conf } = await import('conf');
  try {
    return new Conf<Record<string, unknown>>({ projectName: 'llmgw', cwd: preferencesDir(env), configName: 'config' });
  } catch (err) {
    // As reading it says (cli-preferences.ts): which file, and that fixing or removing it is the way out.
    throw configError(`cannot open the CLI preferences in ${preferencesDir(env)}: ${errorMessage(err)}; fix or remove ${join(preferencesDir(env), 'config.json')}`);
  }
}

export async function setPreference(key: PreferenceKey, value: PreferenceValue, env: NodeJS.ProcessEnv = process.env): Promise<string> {
  const store = await openStore(env);
  store.set(key, value);
  return store.path;
}

/** Removes `key`; true when it was set. */
export async function unsetPreference(key: PreferenceKey, env: NodeJS.ProcessEnv = process.env): Promise<boolean> {
  const store = await openStore(env);
  const had = store.has(key);
  store.delete(key);
  // conf leaves {"ctl": {}} behind; an empty section is noise in a file operators read.
  const section = key.includes('.') ? key.split('.')[0] : undefined;
  if (section) {
    const rest = store.get(section);
    if (rest && typeof rest === 'object' && Object.keys(rest).length === 0) store.delete(section);
  }
  return had;
}
