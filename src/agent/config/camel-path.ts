import type { KeySpec } from './config-keys.js';

/** "supervisor.stop_grace" (duration) → ["supervisor", "stopGraceMs"]. */
export function camelPath(spec: KeySpec): string[] {
  return spec.key.split('.').map((part, i, all) => {
    const camel = part.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
    return i === all.length - 1 && spec.type === 'duration' ? `${camel}Ms` : camel;
  });
}
