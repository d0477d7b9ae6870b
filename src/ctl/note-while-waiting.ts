/** How long a call may take before `ctl` says what it waits for: the brief's "progress on anything that takes more than a second". */
export const WAIT_NOTE_AFTER_MS = 1000;

/**
 * `call`, with `note` written to `out` (stderr) once if it has not settled
 * after `afterMs`: a sleep or a wake can take minutes (a level-2 wake
 * reloads the weights), and a prompt that says nothing for that long reads
 * as hung. stdout stays the answer alone (--json).
 */
export async function noteWhileWaiting<T>(call: Promise<T>, note: string, out: NodeJS.WritableStream = process.stderr, afterMs = WAIT_NOTE_AFTER_MS): Promise<T> {
  const timer = setTimeout(() => out.write(`${note}\n`), afterMs);
  try {
    return await call;
  } finally {
    clearTimeout(timer);
  }
}
