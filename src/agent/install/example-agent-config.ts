import { constants } from 'node:fs';
import { open, readFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { describeErrno, errnoCode } from '../../lib/errno.js';
import { failure } from '../../lib/errors.js';
import { EXAMPLE_AGENT_CONFIG } from './package-files.js';

/**
 * 0640: the configuration names the control plane and the TLS key files; root owns it, an
 * operators' group may read it.
 */
const CONFIG_FILE_MODE = 0o640;

export interface ExampleAgentConfig {
  /** Where the installed package keeps it. */
  source: string;
  /** Where it was written; undefined when only printed. */
  path: string | undefined;
  text: string;
}

/**
 * examples/agent.yaml from the installed package (every key, documented), printed or written to
 * `output`. Never over an existing file unless `force`: that file is likely a node's edited
 * configuration, and replacing it would point a running fleet's next restart at the example.
 */
export async function exampleAgentConfig(opts: { output?: string; force?: boolean } = {}): Promise<ExampleAgentConfig> {
  const text = await readFile(EXAMPLE_AGENT_CONFIG, 'utf8').catch((err: unknown) => {
    throw failure(`cannot read ${EXAMPLE_AGENT_CONFIG}: ${describeErrno(err)}; reinstall the llmgw package`);
  });
  if (opts.output === undefined || opts.output === '-') return { source: EXAMPLE_AGENT_CONFIG, path: undefined, text };
  const path = resolve(opts.output);
  const flags = constants.O_WRONLY | constants.O_CREAT | constants.O_NOFOLLOW | (opts.force ? constants.O_TRUNC : constants.O_EXCL);
  let fh: Awaited<ReturnType<typeof open>>;
  try {
    fh = await open(path, flags, CONFIG_FILE_MODE);
  } catch (err) {
    if (errnoCode(err) === 'EEXIST') throw failure(`${path} already exists and is kept: edit it, or pass --force to replace it with the example`);
    throw failure(`cannot write ${path}: ${describeErrno(err)}${writeFix(errnoCode(err), path)}`);
  }
  try {
    await fh.writeFile(text);
  } finally {
    await fh.close();
  }
  return { source: EXAMPLE_AGENT_CONFIG, path, text };
}

/** What to do about a failed create of `path`: the directory it needs, or the right to write there. */
function writeFix(code: string | undefined, path: string): string {
  if (code === 'ENOENT') return ` (create its directory first: install -d -m 0755 ${dirname(path)})`;
  if (code === 'EACCES' || code === 'EPERM') return ' (run as root, or pass --output FILE where you may write)';
  return '';
}
