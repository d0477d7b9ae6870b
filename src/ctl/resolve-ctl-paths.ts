import { accessSync, constants, readFileSync, statSync } from 'node:fs';
import { describeErrno, isNotFound, isPermissionDenied } from '../lib/errno.js';
import { configError, LlmgwError } from '../lib/errors.js';
import { DEFAULT_ADMIN_SOCKET, DEFAULT_CONFIG_PATH, DEFAULT_LOG_DIR } from '../lib/default-paths.js';

export interface CtlPaths {
  socket: string;
  logDir: string;
  /** Where `socket` came from, for `llmgw config list` and error messages. */
  socketSource: string;
  /** admin.group of the agent config read, if any: the group an error tells the operator about. */
  adminGroup?: string;
}

export interface ResolveCtlPathsOptions {
  /** --socket or LLMGW_SOCKET. */
  socket?: string;
  /** --log-dir. */
  logDir?: string;
  /** --config or LLMGW_CONFIG. */
  configPath?: string;
  /** The operator's stored preferences (`llmgw config`): ctl.socket and ctl.config. */
  stored?: { socket?: string; configPath?: string };
  /** Only `ctl logs` needs the log directory; the others skip reading the config for it. */
  needLogDir?: boolean;
}

/**
 * Where the agent's socket and logs are. The socket: --socket / LLMGW_SOCKET;
 * then admin.socket of an agent config named by --config / LLMGW_CONFIG
 * (naming an agent means its socket); then the stored ctl.socket; then
 * admin.socket of the stored ctl.config, else of the default config file;
 * then the default.
 *
 * A config file the operator named (flag, environment or ctl.config) must
 * exist and be readable: falling back to the default socket would talk to
 * another agent, or report "not running" about the wrong one (exit 78 or 77,
 * naming the file). The stored ctl.config is checked only when it is read
 * (--socket and a stored ctl.socket make it unneeded). The default file may
 * be absent. Only the two keys ctl
 * needs are read. A default file that does not parse is the agent's problem,
 * not the operator's: its keys are skipped. A named one that does not parse is
 * an error (78, naming its line): skipping it talked to the default socket, and
 * "the agent is not running … on /run/llmgw/agent.sock" hid the file's mistake.
 * YAML is loaded only when a file is read, which keeps `ctl status --socket` lean.
 */
export async function resolveCtlPaths(opts: ResolveCtlPathsOptions): Promise<CtlPaths> {
  const stored = opts.stored ?? {};
  const wantSocket = !opts.socket;
  const wantLogDir = Boolean(opts.needLogDir && !opts.logDir);
  // A file named now (--config / LLMGW_CONFIG) is checked whatever else is given: the operator meant it.
  if (opts.configPath) requireReadable(opts.configPath, NAMED_FIX);
  // The stored ctl.config only when it is consulted: a bad stored value must not stop a command that
  // does not need it (`ctl status --socket …`), nor `llmgw config list`, the command that finds it
  // (new-operator walkthrough 2, row 9). A stored ctl.socket beats it for the socket.
  const fileNeeded = opts.configPath ? wantSocket || wantLogDir : (wantSocket && !stored.socket) || wantLogDir;
  if (!opts.configPath && stored.configPath && fileNeeded) requireReadable(stored.configPath, STORED_CONFIG_FIX);
  const configPath = opts.configPath || stored.configPath || DEFAULT_CONFIG_PATH;
  const fromFile = fileNeeded ? await readCtlKeys(configPath, Boolean(opts.configPath || stored.configPath)) : {};
  const [socket, socketSource] = opts.socket
    ? [opts.socket, '--socket / LLMGW_SOCKET']
    : opts.configPath && fromFile.socket
      ? [fromFile.socket, `admin.socket in ${configPath}`]
      : stored.socket
        ? [stored.socket, 'llmgw config ctl.socket']
        : fromFile.socket
          ? [fromFile.socket, `admin.socket in ${configPath}`]
          : [DEFAULT_ADMIN_SOCKET, 'default'];
  return { socket, socketSource, logDir: opts.logDir || fromFile.logDir || DEFAULT_LOG_DIR, ...(fromFile.adminGroup ? { adminGroup: fromFile.adminGroup } : {}) };
}

const NAMED_FIX = "pass the agent's config file with --config (or fix ctl.config with `llmgw config`)";
export const STORED_CONFIG_FIX = 'it is your stored ctl.config: `llmgw config set ctl.config <agent config>` or `llmgw config unset ctl.config`, or pass --socket';

/**
 * Throws unless `path` is a readable file: exit 78 when it is missing or not a file, 77 when it may not
 * be read. `fix` says how to name another one.
 */
export function requireReadable(path: string, fix: string = NAMED_FIX): void {
  try {
    // statSync first: reading a directory or a FIFO would fail late or hang.
    if (!statSync(path).isFile()) throw configError(`agent config ${path} is not a file; ${fix}`);
    accessSync(path, constants.R_OK);
  } catch (err) {
    if (err instanceof LlmgwError) throw err;
    if (isNotFound(err)) throw configError(`agent config ${path} does not exist; ${fix}`);
    if (isPermissionDenied(err)) {
      throw new LlmgwError('permission', `cannot read the agent config ${path}: permission denied; run as root, or pass --socket instead of --config`);
    }
    throw configError(`cannot read the agent config ${path}: ${describeErrno(err)}`);
  }
}

async function readCtlKeys(path: string, named: boolean): Promise<{ socket?: string; logDir?: string; adminGroup?: string }> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch {
    return {};
  }
  try {
    const { parse } = await import('yaml');
    const doc = parse(text) as { admin?: { socket?: unknown; group?: unknown }; supervisor?: { log_dir?: unknown } } | null;
    const str = (v: unknown) => (typeof v === 'string' && v !== '' ? v : undefined);
    const keys = { socket: str(doc?.admin?.socket), logDir: str(doc?.supervisor?.log_dir), adminGroup: str(doc?.admin?.group) };
    return Object.fromEntries(Object.entries(keys).filter(([, v]) => v !== undefined));
  } catch (err) {
    if (!named) return {};
    const at = (err as { linePos?: { line: number }[] }).linePos?.[0]?.line;
    const what = (err as Error).message.split('\n')[0]?.replace(/ at line \d+, column \d+:?$/, '');
    throw configError(`cannot parse the agent config ${path}${at ? `:${at}` : ''}: ${what}; fix it, or pass --socket`);
  }
}
