/**
 * Log lines in the engines' own formats, written synchronously (stdout is
 * the shard's log file or a pipe: both are synchronous on Linux), so the
 * last lines before an exit are never lost.
 */

export type LogLevel = 'INFO' | 'WARNING' | 'ERROR';

const pad = (n: number) => String(n).padStart(2, '0');

/** vLLM's format: `INFO 05-12 10:00:00 [launcher.py:138] message`; errors to stderr. */
export function vllmLog(level: LogLevel, where: string, message: string): void {
  const d = new Date();
  const stamp = `${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  const line = `${level} ${stamp} [${where}] ${message}\n`;
  if (level === 'ERROR') process.stderr.write(line);
  else process.stdout.write(line);
}

/** SGLang's format: `[2026-08-20 10:00:00] message` (level only when not INFO); errors to stderr. */
export function sglangLog(level: LogLevel, message: string): void {
  const d = new Date();
  const stamp = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  const line = `[${stamp}] ${level === 'INFO' ? '' : `${level} `}${message}\n`;
  if (level === 'ERROR') process.stderr.write(line);
  else process.stdout.write(line);
}
