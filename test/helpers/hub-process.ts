import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

/*
 * The hub double (src/sim/sim-hub.ts) in a child process: a test or bench
 * that measures its own event loop during a pull must not have the hub's
 * serving on that loop. Free of vitest, so the benchmarks start it too.
 */

const MAIN = fileURLToPath(new URL('./hub-process-main.ts', import.meta.url));

export interface HubProcess {
  url: string;
  /** The LFS files of acme/big, with the sha256 that names each blob in the store. */
  files: { path: string; sha256: string }[];
  stop(): Promise<void>;
}

/** Starts the hub serving acme/big: `files` LFS files of `mib` MiB each. */
export async function startHubProcess(o: { files: number; mib: number }): Promise<HubProcess> {
  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', MAIN], {
    // stdin a pipe: the hub exits when it closes, so a killed test leaves no hub behind.
    stdio: ['pipe', 'pipe', 'inherit'],
    env: { ...process.env, HUB_FILES: String(o.files), HUB_MIB: String(o.mib) },
  });
  const exited = once(child, 'exit');
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
  };
  try {
    const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream });
    const first = await Promise.race([once(lines, 'line'), exited.then(() => Promise.reject(new Error('the hub process exited before it listened')))]);
    lines.close();
    const told = JSON.parse(String(first[0])) as { url: string; files: { path: string; sha256: string }[] };
    return { ...told, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
