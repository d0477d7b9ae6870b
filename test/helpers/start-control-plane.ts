import { onTestFinished } from 'vitest';
import { ControlPlane, type ControlPlaneOptions } from '../../src/control/control-plane.js';

/** Runs `fn` when the test ends: onTestFinished, or a concurrent test's own (its context's). */
export type OnTestEnd = (fn: () => void | Promise<void>) => void;

export interface StartedControlPlane {
  cp: ControlPlane;
  url: string;
  port: number;
  close(): Promise<void>;
}

/**
 * Starts a ControlPlane on 127.0.0.1 and an ephemeral port. Placement starts
 * at once unless `placementDelayMs` says otherwise (a test with one node has
 * nothing to wait for). Called inside a test, the control plane is closed when
 * the test finishes, pass or fail (`onEnd`: a concurrent test passes its
 * context's onTestFinished); elsewhere (beforeAll) call close() yourself.
 */
export async function startControlPlane(opts: ControlPlaneOptions & { port?: number; onEnd?: OnTestEnd } = {}): Promise<StartedControlPlane> {
  const { port: wanted = 0, onEnd = onTestFinished, ...rest } = opts;
  const cp = new ControlPlane({ placementDelayMs: 0, ...rest });
  const close = () => cp.close();
  try {
    onEnd(close);
  } catch {
    // Not inside a test: the caller owns close().
  }
  const { url, port } = await cp.listen({ host: '127.0.0.1', port: wanted });
  return { cp, url, port, close };
}
