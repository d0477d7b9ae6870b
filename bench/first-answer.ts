import { request } from 'node:http';
import { sleep } from './bench-support.js';

/** How often the bench itself asks a loading engine whether it answers: the resolution of "the engine's first answer". */
export const BENCH_PROBE_MS = 5;

/** One GET to 127.0.0.1:`port``path`, true when it answered 200; false for a refused connection or anything else. */
export function answers200(port: number, path: string): Promise<boolean> {
  return new Promise((resolve) => {
    // SGLang's /health_generate takes over a second by design; 5 s is the agent's own limit for it.
    const req = request({ host: '127.0.0.1', port, path, agent: false, timeout: 5000 }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode === 200));
    });
    req.on('error', () => resolve(false));
    req.on('timeout', () => req.destroy());
    req.end();
  });
}

export interface FirstAnswer {
  /** When the health request that then answered 200 was sent (performance.now()). */
  askedAt: number;
  /** When the engine had answered it 200 and listed its model (performance.now()); NaN when aborted first. */
  answeredAt: number;
}

/**
 * When the engine on `port` first answered `healthPath` 200 and listed its
 * model, seen from here every BENCH_PROBE_MS (so up to that much late: a lag
 * measured from it errs short, never long). A refused connection costs the
 * engine nothing. `askedAt` differs from `answeredAt` by the health check's
 * own time: nothing for /health, a second and more for SGLang's
 * /health_generate, which generates a token and sleeps 1 s before it looks.
 */
export async function firstAnswer(port: number, signal: AbortSignal, healthPath = '/health'): Promise<FirstAnswer> {
  while (!signal.aborted) {
    const askedAt = performance.now();
    if ((await answers200(port, healthPath)) && (await answers200(port, '/v1/models'))) return { askedAt, answeredAt: performance.now() };
    await sleep(BENCH_PROBE_MS);
  }
  return { askedAt: Number.NaN, answeredAt: Number.NaN };
}
