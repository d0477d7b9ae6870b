import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { isNotFound, isPermissionDenied } from '../lib/errno.js';
import { configError, errorMessage, usageError } from '../lib/errors.js';
import { nearestName } from '../lib/nearest-name.js';

/**
 * The operator's CLI preferences (`llmgw config set …`), kept in
 * `$XDG_CONFIG_HOME/llmgw/config.json`. This module only reads the file, with
 * node:fs: `ctl status`'s fast path honours the preferences too, and loading
 * `conf` (which writes them, src/cli/preference-store.ts) costs about 75 ms,
 * more than Node's own start.
 */

export interface PreferenceSpec {
  key: PreferenceKey;
  /** The environment variable that overrides it (a flag overrides both). */
  env: string;
  /** What `config set` accepts, for the error that refuses anything else. */
  accepts: string;
  doc: string;
  parse(text: string): PreferenceValue | undefined;
}

export type PreferenceKey = 'ctl.socket' | 'ctl.config' | 'output.json' | 'color';
export type PreferenceValue = string | boolean;
export type Preferences = Partial<Record<PreferenceKey, PreferenceValue>>;

export const COLOR_CHOICES = ['auto', 'always', 'never'] as const;

// An absolute path only: a relative one would mean a different file in every directory ctl runs from.
const absolutePath = (text: string) => (text.startsWith('/') && !text.includes('\0') ? text : undefined);
const bool = (text: string) => (text === 'true' ? true : text === 'false' ? false : undefined);

export const PREFERENCE_KEYS: readonly PreferenceSpec[] = [
  { key: 'ctl.socket', env: 'LLMGW_SOCKET', accepts: 'an absolute path', doc: "The agent's admin socket that ctl talks to.", parse: absolutePath },
  { key: 'ctl.config', env: 'LLMGW_CONFIG', accepts: 'an absolute path', doc: 'The agent config ctl reads admin.socket and supervisor.log_dir from.', parse: absolutePath },
  { key: 'output.json', env: 'LLMGW_JSON', accepts: 'true or false', doc: 'Print JSON, as --json does, unless told otherwise.', parse: bool },
  {
    key: 'color',
    env: 'LLMGW_COLOR',
    accepts: COLOR_CHOICES.join(', '),
    doc: 'Colour in human output: auto (when stdout is a terminal), always or never.',
    parse: (text) => ((COLOR_CHOICES as readonly string[]).includes(text) ? text : undefined),
  },
];

/** The spec of `name`, or a usage error (exit 2) naming the nearest key. */
export function preferenceSpec(name: string): PreferenceSpec {
  const spec = PREFERENCE_KEYS.find((s) => s.key === name);
  if (spec) return spec;
  const near = nearestName(name, PREFERENCE_KEYS.map((s) => s.key));
  const hint = near ? `did you mean ${near}?` : `the keys are ${PREFERENCE_KEYS.map((s) => s.key).join(', ')}`;
  throw usageError(`unknown preference ${JSON.stringify(name)}; ${hint}`);
}

/** `text` as `spec`'s value, or a usage error (exit 2) that shows what was given and what is accepted. */
export function parsePreference(spec: PreferenceSpec, text: string): PreferenceValue {
  const value = spec.parse(text);
  if (value === undefined) throw usageError(`${spec.key} must be ${spec.accepts}, got ${JSON.stringify(text)}`);
  return value;
}

/** The directory `conf` keeps the file in: XDG's, as env-paths computes it (conf's own default adds "-nodejs"). */
export function preferencesDir(env: NodeJS.ProcessEnv = process.env): string {
  return join(env.XDG_CONFIG_HOME || join(env.HOME || homedir(), '.config'), 'llmgw');
}

export function preferencesFile(env: NodeJS.ProcessEnv = process.env): string {
  return join(preferencesDir(env), 'config.json');
}

/**
 * The stored preferences; none when the file does not exist. A file that is
 * not JSON, or holds a value `config set` would refuse (edited by hand), is a
 * configuration error naming the file and the key, never silently ignored: a
 * ctl that quietly talks to another socket than the operator set is worse
 * than one that stops.
 */
export function readPreferences(env: NodeJS.ProcessEnv = process.env): Preferences {
  const file = preferencesFile(env);
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    if (isNotFound(err)) return {};
    // Not this user's file: HOME kept across setpriv/su to another user points at someone else's preferences.
    if (isPermissionDenied(err)) return {};
    throw configError(`cannot read the CLI preferences ${file}: ${errorMessage(err)}`);
  }
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    throw configError(`cannot parse the CLI preferences ${file}: ${errorMessage(err)}; fix it or remove it`);
  }
  const out: Preferences = {};
  for (const spec of PREFERENCE_KEYS) {
    const raw = spec.key.split('.').reduce<unknown>((node, part) => (node && typeof node === 'object' ? (node as Record<string, unknown>)[part] : undefined), doc);
    if (raw === undefined) continue;
    const value = spec.parse(String(raw));
    if (value === undefined || typeof raw === 'object') {
      throw configError(`${spec.key} in ${file} must be ${spec.accepts}, got ${JSON.stringify(raw)}; fix it with \`llmgw config set ${spec.key} …\``);
    }
    out[spec.key] = value;
  }
  return out;
}

/**
 * A preference's environment override, parsed; undefined when unset or
 * empty. A bad value is a usage error naming the variable.
 */
export function preferenceFromEnv(spec: PreferenceSpec, env: NodeJS.ProcessEnv = process.env): PreferenceValue | undefined {
  const text = env[spec.env];
  if (text === undefined || text === '') return undefined;
  const value = spec.parse(text);
  if (value === undefined) throw usageError(`${spec.env} must be ${spec.accepts}, got ${JSON.stringify(text)}`);
  return value;
}

/** The effective value of a preference without a flag: its environment variable, else the stored one. */
export function effectivePreference(key: PreferenceKey, stored: Preferences, env: NodeJS.ProcessEnv = process.env): PreferenceValue | undefined {
  return preferenceFromEnv(preferenceSpec(key), env) ?? stored[key];
}

/** Whether a command prints JSON without --json: LLMGW_JSON, else the stored output.json. */
export function prefersJson(stored: Preferences, env: NodeJS.ProcessEnv = process.env): boolean {
  return effectivePreference('output.json', stored, env) === true;
}

/** The stored ctl.socket and ctl.config, in the shape resolveCtlPaths takes. */
export function storedCtlPaths(stored: Preferences): { socket?: string; configPath?: string } {
  const str = (v: PreferenceValue | undefined) => (typeof v === 'string' ? v : undefined);
  return { socket: str(stored['ctl.socket']), configPath: str(stored['ctl.config']) };
}
