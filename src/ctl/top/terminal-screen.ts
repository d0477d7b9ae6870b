import { writeSync } from 'node:fs';

const ALT_SCREEN_ON = '\x1b[?1049h';
const ALT_SCREEN_OFF = '\x1b[?1049l';
const CURSOR_HIDE = '\x1b[?25l';
const CURSOR_SHOW = '\x1b[?25h';
const HOME = '\x1b[H';
const CLEAR_LINE_RIGHT = '\x1b[K';
const CLEAR_BELOW = '\x1b[J';

/** The signals that end `ctl top` from outside; each exits 128+n after the terminal is restored. */
const ENDING_SIGNALS: Record<string, number> = { SIGTERM: 15, SIGHUP: 1 };

/**
 * The terminal as `ctl top` takes it: the alternate screen, the cursor
 * hidden, raw mode (keys one at a time, Ctrl-C as a key). Whatever ends the
 * process — q, Ctrl-C, SIGTERM, SIGHUP, an error, an exit from anywhere —
 * the operator's shell gets back its screen, a cursor and line editing:
 * restore() runs from each of those paths, once, and writes synchronously so
 * it is out before the process is.
 */
export class TerminalScreen {
  private restored = false;
  private readonly onExit = () => this.restore();
  private readonly onSignal = (sig: NodeJS.Signals) => {
    this.restore();
    process.exit(128 + (ENDING_SIGNALS[sig] ?? 15));
  };

  constructor(
    private readonly out: NodeJS.WriteStream & { fd: number },
    private readonly input: NodeJS.ReadStream,
  ) {
    this.write(ALT_SCREEN_ON + CURSOR_HIDE);
    input.setRawMode?.(true);
    input.resume();
    process.on('exit', this.onExit);
    for (const sig of Object.keys(ENDING_SIGNALS)) process.on(sig, this.onSignal);
  }

  get columns(): number {
    return this.out.columns ?? 80;
  }

  get rows(): number {
    return this.out.rows ?? 24;
  }

  /** A whole frame, drawn over the last in place (no clear first, so it does not flicker). */
  draw(lines: readonly string[]): void {
    if (this.restored) return;
    this.write(HOME + lines.map((l) => l + CLEAR_LINE_RIGHT).join('\r\n') + CLEAR_BELOW);
  }

  restore(): void {
    if (this.restored) return;
    this.restored = true;
    process.off('exit', this.onExit);
    for (const sig of Object.keys(ENDING_SIGNALS)) process.off(sig, this.onSignal);
    try {
      this.input.setRawMode?.(false);
    } catch {
      // A terminal already gone (SIGHUP) has no mode to restore.
    }
    this.input.pause();
    this.write(CURSOR_SHOW + ALT_SCREEN_OFF);
  }

  private write(text: string): void {
    try {
      writeSync(this.out.fd, text);
    } catch {
      // The terminal closed under us: nothing left to draw on or restore.
    }
  }
}
