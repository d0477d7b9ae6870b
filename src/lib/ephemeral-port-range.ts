import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';

/** Where Linux keeps the range it picks source ports of outgoing connections from (`connect()` without `bind()`). */
export const IP_LOCAL_PORT_RANGE = '/proc/sys/net/ipv4/ip_local_port_range';

export interface PortRange {
  low: number;
  high: number;
}

/**
 * This node's ephemeral port range ("32768\t60999"), or undefined when it
 * cannot be read or makes no sense (no /proc in a container, another OS):
 * the check it feeds is a guard against a race, and a node whose range is
 * unknown is no reason to refuse every shard. A shard port inside it is one
 * the kernel may already have given to some client's outgoing connection:
 * the engine then fails to bind, minutes into loading a model.
 */
export async function readEphemeralPortRange(path = IP_LOCAL_PORT_RANGE): Promise<PortRange | undefined> {
  return parseProcPortRange(await readFile(path, 'utf8').catch(() => undefined));
}

/** readEphemeralPortRange for a constructor that runs once (the control plane's): one small /proc file. */
export function readEphemeralPortRangeSync(path = IP_LOCAL_PORT_RANGE): PortRange | undefined {
  let text: string | undefined;
  try {
    text = readFileSync(path, 'utf8');
  } catch {
    text = undefined;
  }
  return parseProcPortRange(text);
}

function parseProcPortRange(text: string | undefined): PortRange | undefined {
  const m = text === undefined ? null : /^\s*(\d+)\s+(\d+)\s*$/.exec(text);
  if (!m) return undefined;
  const low = Number(m[1]);
  const high = Number(m[2]);
  if (low < 1 || high > 65535 || low > high) return undefined;
  return { low, high };
}

export function isInPortRange(port: number, range: PortRange): boolean {
  return port >= range.low && port <= range.high;
}
