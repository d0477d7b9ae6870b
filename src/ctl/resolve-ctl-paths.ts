import { accessSync, constants, readFileSync, statSync } from 'node:fs';
import { describeErrno, isNotFound, isPermissionDenied } from '../lib/errno.js';
import { configError, LlmgwError } from '../lib/errors.js';
import { DEFAULT_ADMIN_SOCKET, DEFAULT_CONFIG_PATH, DEFAULT_LOG_DIR } from '../lib/default-paths.js';

export interface CtlPaths {
  socket: string;
  logDir: string;
  /** Where `socket` came from, for `llmgw config list` and error messages. */
  socketSource: string;
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
 * naming the file). The default file may be absent. Only the two keys ctl
 * needs are read, and a file that does not parse is the agent's problem, not
 * the operator's: its keys are skipped. YAML is loaded only when a file is
 * read, which keeps `ctl status --socket` lean.
 */
export async function resolveCtlPaths(opts: ResolveCtlPathsOptions): Promise<CtlPaths> {
  const named = opts.configPath || opts.stored?.configPath;
  if (named) requireReadable(named);
  if (opts.socket && (opts.logDir || !opts.needLogDir)) {
    return { socket: opts.socket, logDir: opts.logDir || DEFAULT_LOG_DIR, socketSource: '--socket / LLMGW_SOCKET' };
  }
  const configPath = named ?? DEFAULT_CONFIG_PATH;
  const fromFile = await readCtlKeys(configPath);
  const [socket, socketSource] = opts.socket
    ? [opts.socket, '--socket / LLMGW_SOCKET']
    : opts.configPath && fromFile.socket
      ? [fromFile.socket, `admin.socket in ${configPath}`]
      : opts.stored?.socket
        ? [opts.stored.socket, 'llmgw config ctl.socket']
        : fromFile.socket
          ? [fromFile.socket, `admin.socket in ${configPath}`]
          : [DEFAULT_ADMIN_SOCKET, 'default'];
  return { socket, socketSource, logDir: opts.logDir || fromFile.logDir || DEFAULT_LOG_DIR };
}

function requireReadable(path: string): void {
  try {
    // statSync first: reading a directory or a FIFO would fail late or hang.
    if (!statSync(path).isFile()) throw configError(`agent config ${path} is not a file; pass the agent's config file with --config (or fix ctl.config with \`llmgw config\`)`);
    accessSync(path, constants.R_OK);
  } catch (err) {
    if (err instanceof LlmgwError) throw err;
    if (isNotFound(err)) throw configError(`agent config ${path} does not exist; pass the agent's config file with --config (or fix ctl.config with \`llmgw config\`)`);
    if (isPermissionDenied(err)) {
      throw new LlmgwError('permission', `cannot read the agent config ${path}: permission denied; run as root, or pass --socket instead of --config`);
    }
    throw configError(`cannot read the agent config ${path}: ${describeErrno(err)}`);
  }
}

async function readCtlKeys(path: string): Promise<{ socket?: string; logDir?: string }> {
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
