import type { Stats } from 'node:fs';

/**
 * How the kernel-log reader treats what discovery.kmsg names:
 * - `device`: the real /dev/kmsg, the only fd given to libuv as a stream;
 * - `fifo`, `file`: polled (tests write Xid lines into them);
 * - `refused`: not read at all; `what` says what the path is, for the warning.
 */
export type KmsgSource = { kind: 'device' } | { kind: 'fifo' } | { kind: 'file' } | { kind: 'refused'; what: string };

/** /dev/kmsg's device number (Documentation/admin-guide/devices.txt: major 1, minor 11). */
export const KMSG_MAJOR = 1;
export const KMSG_MINOR = 11;

/** The other memory devices of major 1, named in the warning: /dev/null is where containers map /dev/kmsg. */
const MEMORY_DEVICES: Record<number, string> = { 1: '/dev/mem', 3: '/dev/null', 5: '/dev/zero', 7: '/dev/full', 8: '/dev/random', 9: '/dev/urandom' };

/**
 * Decides from a (f)stat how the kernel log at that path is read.
 *
 * Only 1:11 is streamed (security review 2, N5): libuv registers a streamed fd
 * with epoll once the loop runs, and a device without poll support (/dev/null,
 * /dev/zero, a directory) makes epoll_ctl fail with EPERM, on which libuv
 * calls abort(): exit 134, nothing logged, and under Restart=always a silent
 * crash loop. uv_pipe_open succeeds on those fds, so nothing earlier can tell.
 * Other character and block devices are refused rather than polled: a read of
 * /dev/zero or of a disk never ends, and none of them is a kernel log.
 */
export function classifyKmsgSource(st: Stats): KmsgSource {
  if (st.isFile()) return { kind: 'file' };
  if (st.isFIFO()) return { kind: 'fifo' };
  if (st.isCharacterDevice()) {
    const { major, minor } = deviceNumbers(st.rdev);
    if (major === KMSG_MAJOR && minor === KMSG_MINOR) return { kind: 'device' };
    const name = major === 1 ? MEMORY_DEVICES[minor] : undefined;
    return { kind: 'refused', what: `the character device ${major}:${minor}${name ? ` (${name})` : ''}` };
  }
  if (st.isBlockDevice()) {
    const { major, minor } = deviceNumbers(st.rdev);
    return { kind: 'refused', what: `the block device ${major}:${minor}` };
  }
  if (st.isDirectory()) return { kind: 'refused', what: 'a directory' };
  if (st.isSocket()) return { kind: 'refused', what: 'a socket' };
  return { kind: 'refused', what: 'neither a file, a FIFO nor a device' };
}

/**
 * A Linux dev_t split as glibc's major()/minor() do: 12 bits of major above 8
 * of minor, then the high bits of each further up. BigInt, because the high
 * bits lie beyond the 32 that JavaScript's bit operators keep.
 */
export function deviceNumbers(rdev: number): { major: number; minor: number } {
  const dev = BigInt(rdev);
  const major = ((dev >> 8n) & 0xfffn) | ((dev >> 32n) & 0xfffff000n);
  const minor = (dev & 0xffn) | ((dev >> 12n) & 0xffffff00n);
  return { major: Number(major), minor: Number(minor) };
}
