import { requireReadable, resolveCtlPaths, STORED_CONFIG_FIX } from '../ctl/resolve-ctl-paths.js';
import { LlmgwError } from '../lib/errors.js';
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
  /**
   * Why ctl would refuse this value (ctl.config naming a file that does not exist, and ctl.socket
   * when that is why it cannot be resolved); absent when the value is fine. `config list|get` show
   * it rather than fail: they are how the operator finds a bad stored value.
   */
  problem?: string;
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
    const entry = (value: PreferenceValue, source: string, problem?: string) =>
      preferences.push({ key: spec.key, value, source, doc: spec.doc, ...(problem ? { problem } : {}) });
    if (spec.key === 'ctl.socket') {
      const configPath = env.LLMGW_CONFIG || undefined;
      const stc = { socket: stored['ctl.socket'] as string | undefined, configPath: stored['ctl.config'] as string | undefined };
      const socketFromEnv = fromEnv as string | undefined;
      const sourceOf = (socketSource: string) =>
        socketFromEnv !== undefined ? `env ${spec.env}` : socketSource === 'llmgw config ctl.socket' ? `llmgw config (${file})` : socketSource;
      try {
        const { socket, socketSource } = await resolveCtlPaths({ socket: socketFromEnv, configPath, stored: stc });
        entry(socket, sourceOf(socketSource));
      } catch (err) {
        if (!(err instanceof LlmgwError)) throw err;
        // The agent config it would read is unusable: show what is left without it, and why ctl refuses.
        const { socket, socketSource } = await resolveCtlPaths({ socket: socketFromEnv, stored: { socket: stc.socket } });
        entry(socket, sourceOf(socketSource), `ctl refuses it: ${err.message}`);
      }
    } else if (spec.key === 'ctl.config' && (fromEnv !== undefined || stored[spec.key] !== undefined)) {
      const value = (fromEnv ?? stored[spec.key]) as string;
      entry(value, fromEnv !== undefined ? `env ${spec.env}` : `llmgw config (${file})`, configProblem(value, fromEnv !== undefined));
    } else if (fromEnv !== undefined) entry(fromEnv, `env ${spec.env}`);
    else if (stored[spec.key] !== undefined) entry(stored[spec.key] as PreferenceValue, `llmgw config (${file})`);
    else entry(DEFAULTS[spec.key], 'default');
  }
  return { file, preferences };
}

/** Why ctl would refuse `path` as its agent config, or undefined when it is a readable file. */
function configProblem(path: string, fromEnv: boolean): string | undefined {
  try {
    requireReadable(path, fromEnv ? 'it is LLMGW_CONFIG: set it to an agent config, or unset it' : STORED_CONFIG_FIX);
    return undefined;
  } catch (err) {
    if (err instanceof LlmgwError) return err.message;
    throw err;
  }
}
