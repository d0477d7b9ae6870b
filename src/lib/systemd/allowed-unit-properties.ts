import { nearestName } from '../nearest-name.js';

/**
 * The unit properties a configuration may set on engine units: resource
 * limits and weights, nothing else. Everything that decides what runs, as
 * whom, where its output goes or how it is stopped (ExecStart, User,
 * KillMode, StandardOutput, Delegate…) is the agent's: set from a config
 * file, it could run an engine as another user, or let its processes
 * outlive a stop, which is the fence these units exist for.
 */
export const ALLOWED_UNIT_PROPERTIES = [
  'CPUWeight',
  'CPUQuota',
  'AllowedCPUs',
  'AllowedMemoryNodes',
  'MemoryMin',
  'MemoryLow',
  'MemoryHigh',
  'MemoryMax',
  'MemorySwapMax',
  'IOWeight',
  'TasksMax',
  'LimitNOFILE',
  'LimitMEMLOCK',
  'LimitCORE',
  'Nice',
  'OOMScoreAdjust',
  'OOMPolicy',
] as const;

const ALLOWED = new Set<string>(ALLOWED_UNIT_PROPERTIES);

/**
 * What is wrong with `props`, in one sentence, or undefined when nothing is.
 * Values are handed to systemd-run as one argv element each (never a
 * shell), but systemd parses a value up to a newline: a control character
 * is refused.
 */
export function checkUnitProperties(props: Record<string, string>): string | undefined {
  for (const [name, value] of Object.entries(props)) {
    if (!ALLOWED.has(name)) {
      const guess = nearestName(name, ALLOWED_UNIT_PROPERTIES);
      return `${JSON.stringify(name)} is not a property engine units may set${guess ? `; did you mean ${guess}?` : ''} (allowed: ${ALLOWED_UNIT_PROPERTIES.join(', ')})`;
    }
    // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are exactly what is refused.
    if (value === '' || /[\u0000-\u001f\u007f]/.test(value)) {
      return `${name} must be a non-empty value without control characters, got ${JSON.stringify(value)}`;
    }
  }
  return undefined;
}
