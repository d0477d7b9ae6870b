import { execFile } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);

/**
 * Fills the accept queue of a port whose process is stopped (SIGSTOP: it
 * accepts nothing), so that a new connect gets no SYN-ACK and times out, as
 * on a node that lost power or its network, rather than being refused.
 * Every socket opened goes into `held`, for the caller to destroy at the
 * end. Free of vitest, for bench 15 too.
 *
 * Full is read from the kernel (ss: the listener's queue past its limit,
 * when a SYN to it is dropped), not guessed from connects that did not
 * complete within some time: a connect not seen within 300 ms was taken for
 * a full queue, and on a loaded machine this process saw its completed
 * connects late, left the queue short, and the gang watch's probe was
 * accepted: the silent node looked alive.
 */
export async function fillListenQueue(port: number, held: Socket[]): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const q = await acceptQueue(port);
    if (q.queued > q.limit) return;
    if (Date.now() > deadline) throw new Error(`the accept queue of port ${port} never filled (${q.queued} queued, limit ${q.limit})`);
    // What it lacks, at once; connects still in flight from the last turn only overfill it.
    for (let i = q.queued; i <= q.limit; i++) {
      const s = connect({ host: '127.0.0.1', port });
      s.on('error', () => {});
      held.push(s);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The accept queue of the listener on `port`, as the kernel counts it (ss: Recv-Q queued, Send-Q its limit); full when queued > limit (sk_acceptq_is_full). */
async function acceptQueue(port: number): Promise<{ queued: number; limit: number }> {
  const { stdout } = await execFileAsync('ss', ['-Hltn', `sport = :${port}`]);
  const [, queued, limit] = stdout.trim().split('\n')[0]?.trim().split(/\s+/) ?? [];
  if (queued === undefined || limit === undefined) throw new Error(`nothing listens on port ${port} (ss -ltn)`);
  return { queued: Number(queued), limit: Number(limit) };
}
