import { constants } from 'node:fs';
import { access, mkdir, readFile, stat } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { DEFAULT_CONFIG_PATH } from '../config/config-keys.js';
import { describeErrno } from '../../lib/errno.js';
import { failure, usageError } from '../../lib/errors.js';
import { writeFileAtomic } from '../../lib/write-file-atomic.js';
import { AGENT_UNIT_TEMPLATE, PACKAGE_BIN_JS } from './package-files.js';
import { renderAgentUnit } from './render-agent-unit.js';

export const UNIT_NAME = 'llmgw-agent.service';
export const SYSTEM_UNIT_DIR = '/etc/systemd/system';
/** 0644: systemd and `systemctl cat` read it as any user; only root may change what runs as root. */
const UNIT_FILE_MODE = 0o644;

export interface InstallAgentUnitOptions {
  /** The configuration the unit runs the agent with (default /etc/llmgw/agent.yaml). */
  configPath?: string;
  /** Writes under ROOT/etc/systemd/system (an image being built, a test); created when missing. */
  root?: string;
  /** Writes exactly this file instead; '-' returns the text without writing. */
  output?: string;
  nodePath?: string;
  binPath?: string;
}

export interface InstalledAgentUnit {
  /** Where the unit was written; undefined for --output -. */
  path: string | undefined;
  execStart: string;
  configPath: string;
  /** Where configExists looked: configPath, under --root when given (the image's file, not this host's). */
  configChecked: string;
  /** False when the configuration the unit names is not there yet (the agent would exit 78). */
  configExists: boolean;
  /**
   * Engines of that configuration with neither engines.<name>.user nor
   * allow_root: the agent, root under this unit, refuses to start them until
   * they are given the engine account (security review 2, N1).
   */
  rootEngines: string[];
  text: string;
}

/**
 * The engines `configPath` leaves without an account, read from its engines
 * block alone: a configuration still being written (node_id empty, as the
 * example ships) says this as well as a finished one. Nothing when the file
 * cannot be read or its engines block is wrong: the agent names that at start.
 */
async function rootEnginesOf(configPath: string): Promise<string[]> {
  try {
    const [{ parse }, { parseEnginesConfig }, { EngineRegistry }] = await Promise.all([
      import('yaml'),
      import('../config/parse-engines-config.js'),
      import('../engines/engine-registry.js'),
    ]);
    const doc: unknown = parse(await readFile(configPath, 'utf8'));
    const raw = doc !== null && typeof doc === 'object' ? (doc as Record<string, unknown>).engines : undefined;
    const engines = parseEnginesConfig(raw !== null && typeof raw === 'object' ? (raw as Record<string, unknown>) : {}, (m) => new Error(m));
    // The unit runs the agent as root.
    return new EngineRegistry({ engines, mgmtInterface: '' })
      .accounts(0)
      .filter((a) => a.refused)
      .map((a) => a.engine);
  } catch {
    return [];
  }
}

/** Writes the agent's unit with this installation's absolute paths (see renderAgentUnit). */
export async function installAgentUnit(opts: InstallAgentUnitOptions = {}): Promise<InstalledAgentUnit> {
  if (opts.root !== undefined && opts.output !== undefined) throw usageError('--root and --output both say where to write: pass one');
  const configPath = opts.configPath ?? DEFAULT_CONFIG_PATH;
  const nodePath = opts.nodePath ?? process.execPath;
  const binPath = opts.binPath ?? PACKAGE_BIN_JS;
  await mustBeRunnable(nodePath, 'the node executable');
  await mustBeRunnable(binPath, 'the llmgw entry point');
  const template = await readFile(AGENT_UNIT_TEMPLATE, 'utf8').catch((err: unknown) => {
    throw failure(`cannot read the packaged unit ${AGENT_UNIT_TEMPLATE}: ${describeErrno(err)}; reinstall the llmgw package`);
  });
  const text = renderAgentUnit(template, { nodePath, binPath, configPath });
  const execStart = (text.split('\n').find((l) => l.startsWith('ExecStart=')) ?? '').slice('ExecStart='.length);
  // The configuration the unit will read where it runs: under --root that is the image's, not this
  // host's, which made an image without one look ready (new-operator walkthrough 2, row 20).
  const configChecked = opts.root !== undefined ? join(resolve(opts.root), configPath) : configPath;
  const configExists = await stat(configChecked).then(
    () => true,
    () => false,
  );
  const rootEngines = configExists ? await rootEnginesOf(configChecked) : [];
  if (opts.output === '-') return { path: undefined, execStart, configPath, configChecked, configExists, rootEngines, text };

  const path = opts.output !== undefined ? resolve(opts.output) : join(resolve(opts.root ?? '/'), SYSTEM_UNIT_DIR, UNIT_NAME);
  if (opts.root !== undefined) await mkdir(dirname(path), { recursive: true, mode: 0o755 });
  try {
    await writeFileAtomic(path, text, UNIT_FILE_MODE);
  } catch (err) {
    throw failure(`cannot write ${path}: ${describeErrno(err)}${opts.output === undefined && opts.root === undefined ? ' (run as root, or pass --output FILE)' : ''}`);
  }
  return { path, execStart, configPath, configChecked, configExists, rootEngines, text };
}

async function mustBeRunnable(path: string, what: string): Promise<void> {
  try {
    await access(path, constants.R_OK);
  } catch (err) {
    throw failure(`${what} ${path} cannot be read: ${describeErrno(err)}`);
  }
}
