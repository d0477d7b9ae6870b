import { writeSync } from 'node:fs';

/**
 * Log lines in the engines' own formats, written synchronously to fd 1 or 2
 * (the shard's log file, or a pipe), so the last lines before an exit are
 * never lost.
 *
 * A line the kernel refuses (ENOSPC on a full log disk, EPIPE, EIO) is
 * dropped and the engine carries on, as the engines' Python logging does:
 * `StreamHandler.emit` hands any write error to `Handler.handleError`,
 * whose own report to stderr ends in `except OSError: pass` (CPython
 * Lib/logging/__init__.py, "see issue 5971"). The next line is tried again,
 * so the log resumes when space returns. Node's process.stdout would
 * instead raise the error on the stream, and an unhandled stream error
 * ends the process (new-operator walkthrough 2, row 1).
 */

export type LogLevel = 'INFO' | 'WARNING' | 'ERROR';

const pad = (n: number) => String(n).padStart(2, '0');

/** vLLM's format: `INFO 05-12 10:00:00 [launcher.py:138] message`; errors to stderr. */
export function vllmLog(level: LogLevel, where: string, message: string): void {
  const d = new Date();
  const stamp = `${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  writeEngineOutput(level === 'ERROR' ? 2 : 1, `${level} ${stamp} [${where}] ${message}\n`);
}

/** SGLang's format: `[2026-08-20 10:00:00] message` (level only when not INFO); errors to stderr. */
export function sglangLog(level: LogLevel, message: string): void {
  const d = new Date();
  const stamp = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  writeEngineOutput(level === 'ERROR' ? 2 : 1, `[${stamp}] ${level === 'INFO' ? '' : `${level} `}${message}\n`);
}

let dropped = 0;

/** Lines the kernel refused since the engine started; the sim engine shows it in /metrics. */
export function droppedLogLines(): number {
  return dropped;
}

/** How long a line waits for a full pipe (EAGAIN, when the reader set it non-blocking) before it is dropped. */
const FULL_PIPE_WAIT_MS = 1000;
const pause = new Int32Array(new SharedArrayBuffer(4));

/** Writes `text` whole to fd 1 or 2, or drops it and counts it (see the top of this file). */
export function writeEngineOutput(fd: 1 | 2, text: string): void {
  const bytes = Buffer.from(text);
  let offset = 0;
  const deadline = Date.now() + FULL_PIPE_WAIT_MS;
  while (offset < bytes.length) {
    try {
      offset += writeSync(fd, bytes, offset);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EAGAIN' && Date.now() < deadline) {
        Atomics.wait(pause, 0, 0, 1);
        continue;
      }
      dropped += 1;
      return;
    }
  }
}
