import { CONFIG_KEYS } from './config-keys.js';
import { describeSource, type LoadedConfig } from './load-agent-config.js';
import { renderTable } from '../../lib/table.js';

function show(value: unknown): string {
  if (value === undefined || value === '') return '';
  if (typeof value === 'string') return value;
  return JSON.stringify(value);
}

/** Every key with its effective value (as the file would spell it) and its source. */
export function renderConfigTable(loaded: LoadedConfig): string {
  const rows = CONFIG_KEYS.map((spec) => {
    const source = loaded.sources.get(spec.key);
    return [spec.key, show(loaded.values.get(spec.key)), source ? describeSource(source) : 'unset'];
  });
  const head = `config file: ${loaded.path}${loaded.fileFound ? '' : ' (not found)'}\nserver: ${loaded.config.server}`;
  return `${head}\n\n${renderTable(['KEY', 'VALUE', 'SOURCE'], rows)}`;
}

export function configAsJson(loaded: LoadedConfig) {
  const keys: Record<string, { value: unknown; source: string }> = {};
  for (const spec of CONFIG_KEYS) {
    const source = loaded.sources.get(spec.key);
    keys[spec.key] = { value: loaded.values.get(spec.key) ?? null, source: source ? describeSource(source) : 'unset' };
  }
  return { configFile: loaded.path, configFileFound: loaded.fileFound, keys, effective: loaded.config };
}
