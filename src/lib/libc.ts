import { createRequire } from 'node:module';

type Koffi = typeof import('koffi');

/** libc through koffi, for the few calls Node has no API for (pidfd_open, flock, SO_PEERCRED). */
export interface Libc {
  /** koffi itself, for the structs a prototype names (koffi.struct). */
  koffi: Koffi;
  /** A libc function by its C prototype, e.g. 'int flock(int fd, int operation)'. */
  func(prototype: string): ReturnType<ReturnType<Koffi['load']>['func']>;
  /** errno of the calling thread, right after a failed call. */
  errno(): number;
}

let loaded: Libc | { unsupported: string } | undefined;

/**
 * koffi and libc are loaded on first use, not at import: the agent's start
 * before Register does not pay for an FFI (about 8 ms here) it may never
 * need. Loaded with require, as callers are synchronous. Linux only; the
 * reason is returned, never thrown, so each caller picks its fallback.
 */
function loadLibc(): Libc | { unsupported: string } {
  if (loaded) return loaded;
  if (process.platform !== 'linux') {
    loaded = { unsupported: `libc calls are made on Linux only, not ${process.platform}` };
    return loaded;
  }
  try {
    const koffi = createRequire(import.meta.url)('koffi') as Koffi;
    const libc = koffi.load('libc.so.6');
    loaded = { koffi, func: (prototype) => libc.func(prototype), errno: () => koffi.errno() };
  } catch (err) {
    loaded = { unsupported: `cannot load libc through koffi: ${err instanceof Error ? err.message : String(err)}` };
  }
  return loaded;
}

/**
 * A libc binding made once, on first use: `bind` declares the functions
 * (and structs) a caller needs, which koffi should not parse again on
 * every call. The getter answers the same object each time, or why libc
 * cannot be had.
 */
export function libcBinding<T extends object>(bind: (libc: Libc) => T): () => T | { unsupported: string } {
  let bound: T | { unsupported: string } | undefined;
  return () => {
    if (bound === undefined) {
      const libc = loadLibc();
      bound = 'unsupported' in libc ? libc : bind(libc);
    }
    return bound;
  };
}
