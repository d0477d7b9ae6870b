/**
 * How long after the first Register is out hardware reads (the
 * cached-inventory rescan, the memory sampler) start: the adopted shards'
 * READY follows Register at once, and an engine that dies then must reach
 * the stream as fast as ever. Started right after Register, their nvidia-smi
 * spawns took the CPU such a death waited for (bench 3b: 25 → 70 ms).
 */
export const HARDWARE_AFTER_REGISTER_MS = 1000;
/**
 * How long hardware reads wait for the first Register to go out before they
 * start anyway: a control plane that does not answer must not leave the
 * inventory unchecked.
 */
export const HARDWARE_HEAD_START_MS = 2000;

/**
 * Opens HARDWARE_AFTER_REGISTER_MS after the first session is established
 * (`established()`), or HARDWARE_HEAD_START_MS after it was made when no
 * control plane answers; at once on abort. The cached-inventory rescan and
 * the memory sampler wait on `opened`: each spawns nvidia-smi, ~40 ms of the
 * agent's CPU that an agent with 8 adopted shards spent before their READY
 * reached the stream (bench floor-d). Nothing needs them sooner: Register
 * carries the cached inventory, and heartbeats come every
 * heartbeat_interval (5 s).
 */
export class HardwareStartGate {
  readonly opened: Promise<void>;
  private onEstablished: (() => void) | undefined;

  constructor(signal: AbortSignal) {
    this.opened = new Promise<void>((resolve) => {
      let timer = setTimeout(open, HARDWARE_HEAD_START_MS);
      timer.unref();
      function open() {
        clearTimeout(timer);
        signal.removeEventListener('abort', open);
        resolve();
      }
      signal.addEventListener('abort', open, { once: true });
      this.onEstablished = () => {
        this.onEstablished = undefined;
        clearTimeout(timer);
        timer = setTimeout(open, HARDWARE_AFTER_REGISTER_MS);
        timer.unref();
      };
    });
  }

  /** The first session's Register is out; later sessions change nothing. */
  established(): void {
    this.onEstablished?.();
  }
}
