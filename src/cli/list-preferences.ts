import { DEFAULT_ADMIN_SOCKET, DEFAULT_CONFIG_PATH } from '../lib/default-paths.js';
import { PREFERENCE_KEYS, type PreferenceKey, type PreferenceValue, preferenceFromEnv, preferencesFile, readPreferences } from './cli-preferences.js';

/** One preference as `llmgw config list|get` shows it. */
export interface PreferenceEntry {
  key: PreferenceKey;
  /** The value a command would use without a flag. */
  value: PreferenceValue;
  /** Where it came from: `env LLMGW_SOCKET`, `llmgw config (<file>)`, `admin.socket in <agent config>`, `default`. */
  source: string;
  doc: string;
}

export interface PreferenceList {
  file: string;
  preferences: PreferenceEntry[];
}

const DEFAULTS: Record<PreferenceKey, PreferenceValue> = {
  'ctl.socket': DEFAULT_ADMIN_SOCKET,
  'ctl.config': DEFAULT_CONFIG_PATH,
  'output.json': false,
  color: 'auto',
};

/**
 * Every preference with the value a command would use without a flag, and
 * its source: environment, then `llmgw config`, then (for ctl.socket) the
 * agent config's admin.socket, then the default. ctl.socket is resolved by
 * resolveCtlPaths, the function ctl itself uses, so this cannot say one
 * socket while ctl talks to another.
 */
export async function listPreferences(env: NodeJS.ProcessEnv = process.env): Promise<PreferenceList> {
  const file = preferencesFile(env);
  const stored = readPreferences(env);
  const preferences: PreferenceEntry[] = [];
  for (const spec of PREFERENCE_KEYS) {
    const fromEnv = preferenceFromEnv(spec, env);
    const entry = (value: PreferenceValue, source: string) => preferences.push({ key: spec.key, value, source, doc: spec.doc });
    if (spec.key === 'ctl.socket') {
      const { resolveCtlPaths } = await import('../ctl/resolve-ctl-paths.js');
      const configPath = env.LLMGW_CONFIG || undefined;
      const stc = { socket: stored['ctl.socket'] as string | undefined, configPath: stored['ctl.config'] as string | undefined };
      const { socket, socketSource } = await resolveCtlPaths({ socket: fromEnv as string | undefined, configPath, stored: stc });
      entry(socket, fromEnv !== undefined ? `env ${spec.env}` : socketSource === 'llmgw config ctl.socket' ? `llmgw config (${file})` : socketSource);
    } else if (fromEnv !== undefined) entry(fromEnv, `env ${spec.env}`);
    else if (stored[spec.key] !== undefined) entry(stored[spec.key] as PreferenceValue, `llmgw config (${file})`);
    else entry(DEFAULTS[spec.key], 'default');
  }
  return { file, preferences };
}
