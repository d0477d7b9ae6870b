import { readFileSync } from 'node:fs';
import { DEFAULT_ADMIN_SOCKET, DEFAULT_CONFIG_PATH, DEFAULT_LOG_DIR } from '../agent/config/config-keys.js';

export interface CtlPaths {
  socket: string;
  logDir: string;
}

export interface ResolveCtlPathsOptions {
  /** --socket or LLMGW_SOCKET. */
  socket?: string;
  /** --log-dir. */
  logDir?: string;
  /** --config; DEFAULT_CONFIG_PATH when absent. */
  configPath?: string;
  /** Only `ctl logs` needs the log directory; the others skip reading the config for it. */
  needLogDir?: boolean;
}

/**
 * Where the agent's socket and logs are: a flag (or LLMGW_SOCKET) first, then
 * the agent's own config file when it can be read, then the defaults. Only
 * the two keys ctl needs are read, and leniently: an agent config that ctl
 * cannot parse, or may not read, is the agent's problem, not the operator's,
 * so it falls back to the defaults. YAML is loaded only when a path is
 * missing and the file exists, which keeps `ctl status --socket` lean.
 */
export async function resolveCtlPaths(opts: ResolveCtlPathsOptions): Promise<CtlPaths> {
  if (opts.socket && (opts.logDir || !opts.needLogDir)) return { socket: opts.socket, logDir: opts.logDir || DEFAULT_LOG_DIR };
  const fromFile = await readCtlKeys(opts.configPath ?? DEFAULT_CONFIG_PATH);
  return {
    socket: opts.socket || fromFile.socket || DEFAULT_ADMIN_SOCKET,
    logDir: opts.logDir || fromFile.logDir || DEFAULT_LOG_DIR,
  };
}

async function readCtlKeys(path: string): Promise<Partial<CtlPaths>> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch {
    return {};
  }
  try {
    const { parse } = await import('yaml');
    const doc = parse(text) as { admin?: { socket?: unknown }; supervisor?: { log_dir?: unknown } } | null;
    const str = (v: unknown) => (typeof v === 'string' && v !== '' ? v : undefined);
    return { socket: str(doc?.admin?.socket), logDir: str(doc?.supervisor?.log_dir) };
  } catch {
    return {};
  }
}
