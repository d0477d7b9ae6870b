import { readFileSync } from 'node:fs';

/** Where Linux keeps the ports it hands to outgoing connections (`connect()` without `bind()`). */
export const EPHEMERAL_PORT_RANGE_PATH = '/proc/sys/net/ipv4/ip_local_port_range';

/**
 * This machine's ephemeral port range, or undefined where there is none to
 * read (not Linux, a sandbox without /proc). A shard port inside it is one
 * the kernel may already have given to some client's outgoing connection:
 * the engine then fails to bind, minutes into loading a model.
 */
export function readEphemeralPortRange(path: string = EPHEMERAL_PORT_RANGE_PATH): [number, number] | undefined {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
  const m = /^\s*(\d+)\s+(\d+)\s*$/.exec(text);
  const first = Number(m?.[1]);
  const last = Number(m?.[2]);
  if (!m || first < 1 || last > 65535 || first > last) return undefined;
  return [first, last];
}
