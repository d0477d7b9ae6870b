import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../helpers/run-cli.js';

const run = promisify(execFile);

/**
 * In a fresh node (this worker may have loaded koffi's own entry already,
 * for NVML): a libc call made through libcBinding, and which of koffi's
 * files were loaded to make it. On glibc x64 the prebuilt is loaded
 * straight (libc.ts says why: 7-12 ms of koffi's loader before a warm's or
 * a pull's first byte); the call itself must work the same.
 */
async function libcInFreshNode(): Promise<{ pid: number; getpid: number; koffiEntryLoaded: boolean; version: string }> {
  const libc = pathToFileURL(join(REPO_ROOT, 'dist/lib/libc.js')).href;
  const script = `
    import { createRequire } from 'node:module';
    import { libcBinding } from ${JSON.stringify(libc)};
    const get = libcBinding((l) => ({ getpid: l.func('int getpid(void)'), version: l.koffi.version }));
    const b = get();
    if ('unsupported' in b) throw new Error(b.unsupported);
    const cache = Object.keys(createRequire(import.meta.url).cache);
    console.log(JSON.stringify({ pid: process.pid, getpid: b.getpid(), version: b.version, koffiEntryLoaded: cache.some((f) => /[/]koffi[/]src[/]koffi[/]index[.]cjs$/.test(f)) }));
  `;
  const { stdout } = await run(process.execPath, ['--input-type=module', '-e', script], { timeout: 20_000, killSignal: 'SIGKILL' });
  return JSON.parse(stdout.trim());
}

describe('libc through koffi', () => {
  it.runIf(process.platform === 'linux' && process.arch === 'x64')("loads koffi's glibc prebuilt straight, at koffi's version, and its calls work", async () => {
    const r = await libcInFreshNode();
    expect(r.getpid).toBe(r.pid);
    const { createRequire } = await import('node:module');
    const koffiVersion = (createRequire(import.meta.url)('koffi') as { version: string }).version;
    expect(r.version).toBe(koffiVersion);
    expect(r.koffiEntryLoaded).toBe(false);
  });
});
