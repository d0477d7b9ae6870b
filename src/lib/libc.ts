import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

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
    const koffi = loadKoffi();
    const libc = koffi.load('libc.so.6');
    loaded = { koffi, func: (prototype) => libc.func(prototype), errno: () => koffi.errno() };
  } catch (err) {
    loaded = { unsupported: `cannot load libc through koffi: ${err instanceof Error ? err.message : String(err)}` };
  }
  return loaded;
}

/**
 * koffi's native module, loaded straight from its prebuilt for glibc x64
 * when that is the one installed beside koffi at koffi's own version: about
 * 1.5 ms here against 7-12 ms for `require('koffi')`, whose entry reads
 * node's ELF header to tell glibc from musl, compiles 11 kB of loader and
 * only then loads the same file (koffi 3.3.4, src/koffi/index.cjs: detectPlatform,
 * loadDynamic, wrapNative). A `models warm` or `pull` pays it before its first
 * byte (issue 52, 14b and 14e). The wrapper adds nothing used here (deprecated
 * aliases), and its version check is kept. Anything else (another platform,
 * a musl libc, a missing or mismatched prebuilt) goes through koffi's own loader.
 */
function loadKoffi(): Koffi {
  const require = createRequire(import.meta.url);
  if (process.arch === 'x64') {
    try {
      const entry = require.resolve('koffi');
      const version = (JSON.parse(readFileSync(join(dirname(entry), 'package.json'), 'utf8')) as { version?: string }).version;
      const native = createRequire(entry)('@koromix/koffi-linux-x64/linux_x64/koffi.node') as Koffi;
      if (native.version === version) return native;
    } catch {
      // koffi's loader below says what is wrong, if anything is.
    }
  }
  return require('koffi') as Koffi;
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
