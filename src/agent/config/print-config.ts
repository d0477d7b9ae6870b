import { LlmgwError } from '../../lib/errors.js';
import { renderTable } from '../../lib/table.js';
import { checkAgentStart, startNotes } from './check-agent-start.js';
import { CONFIG_KEYS, envNames, SPEC_BY_KEY } from './config-keys.js';
import { describeMisspeltEnv, misspeltEnvNames } from './misspelt-env-names.js';
import { describeSource, type LoadConfigOptions, type LoadedConfig, loadAgentConfig } from './load-agent-config.js';

/** A value wider than this is cut with "…" in the table (`--json` shows it whole): a long list must not push SOURCE off a terminal. */
export const PRINT_CONFIG_VALUE_WIDTH = 60;

/** What `--print-config` prints: the loaded configuration, and the required keys nothing set. */
export interface PrintableConfig {
  loaded: LoadedConfig;
  /** Required keys set nowhere (file, environment, flag); their values in `loaded` are placeholders, never shown. */
  missing: string[];
  /** What else a start would refuse (checkAgentStart): each the message `agent run` would exit 78 with. */
  startProblems: string[];
  /** LLMGW_* variables that look like a configuration variable misspelt, and are ignored (a warning, not a refusal). */
  envWarnings: string[];
  /** What the start would wait for rather than refuse (startNotes): TLS files not written yet. */
  startNotes?: string[];
}

/** Whether `agent run` would start with this configuration; `--print-config` exits 78 when not. */
export function wouldStart(p: PrintableConfig): boolean {
  return p.missing.length === 0 && p.startProblems.length === 0;
}

/** The `error:` lines for stderr when it would not: one per reason, each as the start would say it. */
export function startRefusals(p: PrintableConfig): string[] {
  // As loadAgentConfig words it, which --print-config stepped over to show the rest.
  const file = p.loaded.fileFound ? p.loaded.path : `${p.loaded.path} (not found)`;
  const required = p.missing.map((key) => {
    const spec = SPEC_BY_KEY.get(key);
    const ways = [file, ...(spec ? [envNames(spec)[0]] : []), ...(spec?.flag ? [`--${spec.flag}`] : [])];
    return `${key} is required (set it in ${ways.join(', ')})`;
  });
  return [...required, ...p.startProblems];
}

const REQUIRED = CONFIG_KEYS.filter((k) => k.required).map((k) => k.key);

/**
 * Loads the configuration for `--print-config`, which must show what it has
 * even when required keys are missing (a new node has no config file yet):
 * each missing required key is filled with a placeholder flag and the load
 * retried, and the key reported as missing. Any other error (a bad value, an
 * unknown key, a file that does not parse) is thrown as loadAgentConfig
 * throws it: a config that is invalid still exits 78.
 */
export function loadConfigForPrint(options: LoadConfigOptions): PrintableConfig {
  const missing: string[] = [];
  const flags: Record<string, string | undefined> = { ...options.flags };
  for (;;) {
    try {
      const loaded = loadAgentConfig({ ...options, flags });
      const envWarnings = misspeltEnvNames(options.env ?? process.env).map(describeMisspeltEnv);
      return { loaded, missing, startProblems: checkAgentStart(loaded.config), envWarnings, startNotes: startNotes(loaded.config) };
    } catch (err) {
      const key = err instanceof LlmgwError ? /^(\S+) is required \(/.exec(err.message)?.[1] : undefined;
      if (!key || !REQUIRED.includes(key) || missing.includes(key)) throw err;
      missing.push(key);
      // Loopback http passes the server checks, so the rest of the file is still validated.
      flags[key] = key === 'server' ? 'http://127.0.0.1:1' : 'placeholder';
    }
  }
}

function show(value: unknown): string {
  if (value === undefined || value === '') return '';
  if (typeof value === 'string') return value;
  return JSON.stringify(value);
}

/** Every key with its effective value (as the file would spell it) and its source. */
export function renderConfigTable({ loaded, missing, startProblems, envWarnings, startNotes = [] }: PrintableConfig): string {
  const rows = CONFIG_KEYS.map((spec) => {
    if (missing.includes(spec.key)) return [spec.key, '<missing>', 'required: set it in the file, the environment or a flag'];
    const source = loaded.sources.get(spec.key);
    return [spec.key, show(loaded.values.get(spec.key)), source ? describeSource(source) : 'unset'];
  });
  const head = [`config file: ${loaded.path}${loaded.fileFound ? '' : ' (not found)'}`];
  head.push(missing.length > 0 ? `missing required keys: ${missing.join(', ')} (the agent will not start without them)` : `server: ${loaded.config.server}`);
  for (const problem of startProblems) head.push(`would not start: ${problem}`);
  for (const warning of envWarnings) head.push(`warning: ${warning}`);
  for (const note of startNotes) head.push(`note: ${note}`);
  return `${head.join('\n')}\n\n${renderTable(['KEY', 'VALUE', 'SOURCE'], rows, { maxWidths: [undefined, PRINT_CONFIG_VALUE_WIDTH] })}`;
}

export function configAsJson({ loaded, missing, startProblems, envWarnings, startNotes = [] }: PrintableConfig) {
  const keys: Record<string, { value: unknown; source: string }> = {};
  for (const spec of CONFIG_KEYS) {
    if (missing.includes(spec.key)) {
      keys[spec.key] = { value: null, source: 'missing' };
      continue;
    }
    const source = loaded.sources.get(spec.key);
    keys[spec.key] = { value: loaded.values.get(spec.key) ?? null, source: source ? describeSource(source) : 'unset' };
  }
  // The effective config holds the placeholders when keys are missing: not worth showing.
  return {
    configFile: loaded.path,
    configFileFound: loaded.fileFound,
    missingRequired: missing,
    // startable: whether `agent run` would start (the command exits 78 when not); startProblems: why else not.
    startable: missing.length === 0 && startProblems.length === 0,
    startProblems,
    envWarnings,
    startNotes,
    keys,
    effective: missing.length > 0 ? null : loaded.config,
  };
}
