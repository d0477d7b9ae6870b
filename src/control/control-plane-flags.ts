import { usageError } from '../lib/errors.js';
import type { ServeControlPlaneOptions } from './serve-control-plane.js';

/** `llmgw dev control-plane`'s flags as given (durations already in ms, parsed by the shared duration flag). */
export interface ControlPlaneFlags {
  listen: string;
  tlsCert?: string;
  tlsKey?: string;
  tlsCa?: string;
  nodeGraceMs?: number;
  retryBackoffMs?: number;
  placementDelayMs?: number;
  portRange?: string;
}

export type ControlPlaneSettings = Pick<ServeControlPlaneOptions, 'listen' | 'tls' | 'nodeGraceMs' | 'retryBackoffMs' | 'placementDelayMs' | 'portRange'>;

/**
 * The reference control plane's settings from its flags, every bad value a
 * usage error (exit 2) that shows what was given and how to write it. TLS is
 * all three files or none: two of three would serve plaintext, or TLS that
 * accepts any client, while the operator believes it is mutual TLS.
 */
export function controlPlaneSettings(f: ControlPlaneFlags): ControlPlaneSettings {
  const tls = [f.tlsCert, f.tlsKey, f.tlsCa];
  if (tls.some((x) => x !== undefined) && !tls.every((x) => x !== undefined)) {
    throw usageError('--tls-cert, --tls-key and --tls-ca go together: mutual TLS needs all three');
  }
  return {
    listen: parseListen(f.listen),
    ...(f.tlsCert ? { tls: { cert: f.tlsCert, key: f.tlsKey as string, ca: f.tlsCa as string } } : {}),
    ...(f.nodeGraceMs !== undefined ? { nodeGraceMs: f.nodeGraceMs } : {}),
    ...(f.retryBackoffMs !== undefined ? { retryBackoffMs: f.retryBackoffMs } : {}),
    ...(f.placementDelayMs !== undefined ? { placementDelayMs: f.placementDelayMs } : {}),
    ...(f.portRange ? { portRange: parsePortRange(f.portRange) } : {}),
  };
}

export function parseListen(text: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d{1,5})$/.exec(text);
  const port = Number(m?.[3]);
  if (!m || port > 65535) throw usageError(`--listen ${JSON.stringify(text)} is not HOST:PORT; write it like 127.0.0.1:8443 or [::1]:0`);
  return { host: (m[1] ?? m[2]) as string, port };
}

export function parsePortRange(text: string): [number, number] {
  const m = /^(\d{1,5})-(\d{1,5})$/.exec(text);
  const first = Number(m?.[1]);
  const last = Number(m?.[2]);
  if (!m || first < 1 || last > 65535 || first > last) throw usageError(`--port-range ${JSON.stringify(text)} is not FIRST-LAST; write it like 18000-18999`);
  return [first, last];
}
