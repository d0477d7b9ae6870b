import { readFileSync } from 'node:fs';
import { describeErrno } from './errno.js';
import { configError } from './errors.js';

/**
 * A certificate or key file named by `key` (the config key or flag that
 * named it). One that cannot be read is a configuration error saying which
 * and why: TLS that cannot load is refused, never downgraded to plaintext.
 */
export function readPemFile(path: string, key: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    throw configError(`${key}: cannot read ${path}: ${describeErrno(err)}`, { cause: err });
  }
}
