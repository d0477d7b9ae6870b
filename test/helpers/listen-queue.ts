import { connect, type Socket } from 'node:net';

/**
 * Fills the accept queue of a port whose process is stopped (SIGSTOP: it
 * accepts nothing), so that a new connect gets no SYN-ACK and times out, as
 * on a node that lost power or its network, rather than being refused.
 * Every socket opened goes into `held`, for the caller to destroy at the
 * end. Free of vitest, for bench 15 too.
 */
export async function fillListenQueue(port: number, held: Socket[]): Promise<void> {
  for (let batch = 0; batch < 100; batch++) {
    const opened = await Promise.all(
      Array.from({ length: 64 }, () => {
        const s = connect({ host: '127.0.0.1', port });
        s.on('error', () => {});
        held.push(s);
        return new Promise<boolean>((r) => {
          const t = setTimeout(() => r(false), 300);
          s.once('connect', () => {
            clearTimeout(t);
            r(true);
          });
        });
      }),
    );
    if (opened.includes(false)) return;
  }
  throw new Error(`the accept queue of port ${port} never filled`);
}
