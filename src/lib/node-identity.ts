import { hostname as osHostname, networkInterfaces } from 'node:os';

/** The first IPv4 address of an interface, or '' when it has none. */
export function interfaceIPv4(name: string): string {
  const addrs = networkInterfaces()[name] ?? [];
  return addrs.find((a) => a.family === 'IPv4')?.address ?? '';
}

/**
 * The address other nodes reach this one on: configured, else the first IPv4
 * of the management interface (multi-node leaders are dialled on it).
 */
export function resolveMgmtAddr(configured: string, mgmtInterface: string): string {
  return configured || interfaceIPv4(mgmtInterface);
}

export function resolveHostname(configured: string): string {
  return configured || osHostname();
}
