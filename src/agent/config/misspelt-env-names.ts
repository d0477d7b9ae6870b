import { nearestName } from '../../lib/nearest-name.js';
import { CONFIG_KEYS, envNames } from './config-keys.js';

/**
 * LLMGW_* variables read by something other than the agent's configuration:
 * the CLI (src/cli), oclif itself (its `<BIN>_*` variables), the fakes and
 * internal switches. None of them is a typo, whatever it looks like.
 */
const OTHER_KNOWN = new Set([
  'LLMGW_CONFIG',
  'LLMGW_SOCKET',
  'LLMGW_JSON',
  'LLMGW_COLOR',
  'LLMGW_DEBUG',
  'LLMGW_CONTENT_TYPE',
  'LLMGW_CONFIG_DIR',
  'LLMGW_CACHE_DIR',
  'LLMGW_DATA_DIR',
  'LLMGW_SHELL',
  'LLMGW_NPM_LOG_LEVEL',
  'LLMGW_NPM_REGISTRY',
  'LLMGW_REDIRECTED',
  'LLMGW_PLATFORM',
  'LLMGW_SKIP_NEW_VERSION_CHECK',
  'LLMGW_NEW_VERSION_CHECK_FREQ',
  'LLMGW_DISABLE_AUTOUPDATE',
  'LLMGW_UPDATE_INSTRUCTIONS',
]);
/** Families of variables that are not configuration (bin/fake-nvidia-smi's, the sims', internal test switches). */
const OTHER_PREFIXES = ['LLMGW_FAKE_', 'LLMGW_SIM_', 'LLMGW_INTERNAL_', 'LLMGW_TEST_'];

export interface MisspeltEnvName {
  name: string;
  /** The configuration variable it is most likely meant to be. */
  meant: string;
}

/**
 * LLMGW_* variables set in `env` that the configuration does not read but
 * that are one slip from a variable it does (LLMGW_NODEID for
 * LLMGW_NODE_ID): such a variable is silently ignored, and the agent runs
 * with the file's value or none (new-operator walkthrough 2, row 22). Only
 * near misses are named, so that the environment's other LLMGW_* variables
 * (the CLI's, oclif's, the fakes') are not. A warning, never a refusal: a
 * stray variable must not stop a node.
 */
export function misspeltEnvNames(env: NodeJS.ProcessEnv): MisspeltEnvName[] {
  const configNames = CONFIG_KEYS.flatMap((spec) => [...envNames(spec)]);
  const known = new Set([...configNames, ...OTHER_KNOWN]);
  // Underscores are where names are most often slipped: compare without them first.
  const squash = (n: string) => n.replaceAll('_', '').toLowerCase();
  const bySquashed = new Map(configNames.map((n) => [squash(n), n]));
  const out: MisspeltEnvName[] = [];
  for (const name of Object.keys(env).sort()) {
    if (!name.startsWith('LLMGW_') || known.has(name) || OTHER_PREFIXES.some((p) => name.startsWith(p))) continue;
    if (env[name] === undefined) continue;
    const meant = bySquashed.get(squash(name)) ?? nearestSuffix(name, configNames);
    if (meant) out.push({ name, meant });
  }
  return out;
}

/** The configuration variable whose part after LLMGW_ is a plausible typo of `name`'s. */
function nearestSuffix(name: string, configNames: readonly string[]): string | undefined {
  const suffix = (n: string) => n.slice('LLMGW_'.length);
  const near = nearestName(suffix(name), configNames.map(suffix));
  return near === undefined ? undefined : `LLMGW_${near}`;
}

/** One line for a log or `--print-config`. */
export function describeMisspeltEnv(m: MisspeltEnvName): string {
  return `${m.name} is not a variable the agent reads, and is ignored; did you mean ${m.meant}?`;
}
