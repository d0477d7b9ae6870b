import { readFileSync } from 'node:fs';
import { describeErrno, errnoCode } from './errno.js';
import { configError } from './errors.js';

/**
 * A TLS file that does not exist yet: at boot a Vault agent, cert-manager or
 * SPIRE often writes the node's certificate a few seconds after the agent
 * starts, so the connection waits for it (retried with the reconnect
 * backoff) instead of ending the agent (new-operator walkthrough 2, row 2).
 */
export class TlsFileNotWritten extends Error {
  override readonly name = 'TlsFileNotWritten';
  constructor(
    readonly key: string,
    readonly path: string,
    options?: { cause?: unknown },
  ) {
    super(`waiting for ${key} ${path} (not written yet)`, options);
  }
}

/** The TlsFileNotWritten in `err` or its causes (a transport may wrap it), if any. */
export function findTlsFileNotWritten(err: unknown): TlsFileNotWritten | undefined {
  let e: unknown = err;
  for (let depth = 0; e && depth < 5; depth++) {
    if (e instanceof TlsFileNotWritten) return e;
    e = e instanceof Error ? e.cause : undefined;
  }
  return undefined;
}

/**
 * A certificate or key file named by `key` (the config key or flag that
 * named it). One that cannot be read is a configuration error saying which
 * and why: TLS that cannot load is refused, never downgraded to plaintext.
 * With `waitIfMissing`, a file that does not exist (ENOENT) is a
 * TlsFileNotWritten instead: retried, not refused.
 */
export function readPemFile(path: string, key: string, opts: { waitIfMissing?: boolean } = {}): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    if (opts.waitIfMissing && errnoCode(err) === 'ENOENT') throw new TlsFileNotWritten(key, path, { cause: err });
    throw configError(`${key}: cannot read ${path}: ${describeErrno(err)}`, { cause: err });
  }
}
