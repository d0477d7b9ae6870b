import { readFile } from 'node:fs/promises';

/** Where Linux keeps the range it picks source ports of outgoing connections from. */
export const IP_LOCAL_PORT_RANGE = '/proc/sys/net/ipv4/ip_local_port_range';

export interface PortRange {
  low: number;
  high: number;
}

/**
 * This node's ephemeral port range ("32768\t60999"), or undefined when it
 * cannot be read or makes no sense (no /proc in a container, another OS):
 * the check it feeds is a guard against a race, and a node whose range is
 * unknown is no reason to refuse every shard.
 */
export async function readEphemeralPortRange(path = IP_LOCAL_PORT_RANGE): Promise<PortRange | undefined> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch {
    return undefined;
  }
  const m = /^\s*(\d+)\s+(\d+)\s*$/.exec(text);
  if (!m) return undefined;
  const low = Number(m[1]);
  const high = Number(m[2]);
  if (low < 1 || high > 65535 || low > high) return undefined;
  return { low, high };
}

export function isInPortRange(port: number, range: PortRange): boolean {
  return port >= range.low && port <= range.high;
}
