import { type Socket, connect } from 'node:net';
import { errnoCode } from '../../../lib/errno.js';
import { cgroupMembers } from '../../../lib/process/cgroup-members.js';
import { type ListeningSocket, listeningSocketOwners, readListeningSockets, socketInodesOf } from '../../../lib/process/listening-socket-owners.js';
import { netlinkListeners, netlinkListeningPorts } from '../../../lib/process/netlink-listeners.js';
import { effectiveUid, listProcessGroup } from '../../../lib/process/process-table.js';

/**
 * Who listens on a shard's port. 'nobody': the engine is still loading (no
 * packet need reach it to know). 'engine': a socket of the shard's processes,
 * and no other. 'other': someone else's socket; `reason` is what the shard's
 * status says. 'unknown': this host cannot tell (no /proc/net/tcp).
 */
export type PortOwner =
  | { owner: 'nobody' }
  /** `connection`: the check's own connection to the engine, open, when the caller asked to keep it (keepConnection). */
  | { owner: 'engine'; connection?: Socket }
  | { owner: 'other'; pid: number | undefined; uid: number; reason: string }
  | { owner: 'unknown'; why: string };

/** The processes a shard's port must belong to. */
export interface PortOwnerTarget {
  port: number;
  /** The engine's leader. */
  pid: number;
  /** Its process group: the candidates with the direct launcher. */
  pgid: number;
  /** Under systemd-run: the leader's cgroup (the unit's) is the candidates, workers outside the group included. */
  unit?: { name: string };
}

/**
 * One check of who listens on the port; each call reads the tables again
 * (see LISTEN_TABLE_TTL_MS). `loading`: asked by a readiness wait, whose
 * engine's port is most likely still closed: whether anything listens is
 * then read from a dump of every listening port shared by all such waits
 * (LISTENING_PORTS_TTL_MS), not from a connect of its own.
 */
export interface PortOwnerAsk {
  loading?: boolean;
  /**
   * The connection that found something accepting is handed to the caller,
   * open, with an 'engine' verdict (PortOwner.connection), the caller then
   * to end it; closed as before with any other verdict. The health watch
   * sends its /health on it (tick-connection.ts).
   */
  keepConnection?: boolean;
}

export type PortOwnerCheck = ((opts?: PortOwnerAsk) => Promise<PortOwner>) & {
  /** Resolves once a dump of the listening ports lists the port, after `maxMs`, or on `signal` (untilPortListed). */
  untilListed?: (maxMs: number, signal: AbortSignal) => Promise<void>;
};

/**
 * How long one read of /proc/net/tcp{,6} serves every shard: shards that
 * finish loading together (a replica's ranks, a node brought up at once)
 * judge their ports from one read. Shorter than the readiness tick, so no
 * tick reads a table older than the previous tick.
 */
export const LISTEN_TABLE_TTL_MS = 20;

/**
 * Only where netlink cannot be asked (see listenersOn) and the tables are
 * read instead: how long a port found the engine's is taken to stay so
 * while something still accepts on it. While the engine holds 0.0.0.0:P or
 * 127.0.0.1:P nobody else can bind the address the probes dial
 * (EADDRINUSE; SO_REUSEPORT only within one uid), so the verdict can only
 * go stale if the engine closes its own listener, and a squatter that
 * binds then is seen within this long. Reading both tables on every health
 * probe of a READY shard cost 2 ms of kernel time per shard per health
 * interval, a third of figure 5b's budget with 8 shards; netlink's answer
 * costs 70 µs, so with it every probe is checked.
 */
export const ENGINE_RECHECK_MS = 30_000;

let shared: { atMs: number; sockets: Promise<ListeningSocket[]> } | undefined;

/**
 * How long one netlink dump of every listening port serves the readiness
 * waits of loading engines. 64 engines loading at once, each waited on with
 * a connect every readiness tick (50 ms), made 1,280 refused connects a
 * second, each a socket, a timer and listeners in the agent: the agent's
 * busiest time was while nothing could be READY yet, and the first answers
 * queued behind it (bench figure 16). A dump costs about what one connect
 * does and answers for all of them; within this TTL a port that opens is
 * seen by the next tick at most this much later.
 */
export const LISTENING_PORTS_TTL_MS = 10;

let sharedPorts: { atMs: number; ports: Set<number> } | undefined;

/** The ports listened on now, shared for LISTENING_PORTS_TTL_MS; undefined where netlink cannot be asked. */
function listeningPortsNow(): Set<number> | undefined {
  if (netlinkUnsupported !== undefined) return undefined;
  const now = performance.now();
  if (sharedPorts && now - sharedPorts.atMs < LISTENING_PORTS_TTL_MS) return sharedPorts.ports;
  const asked = netlinkListeningPorts();
  if ('unsupported' in asked) {
    netlinkUnsupported = asked.unsupported;
    return undefined;
  }
  sharedPorts = { atMs: now, ports: asked };
  return asked;
}

/**
 * How often one dump of the listening ports is read for every readiness wait
 * whose port is not listed yet (untilPortListed): a port that opens is seen
 * within this, where each wait's own tick (READY_TICK_MS, 50 ms) saw it 25 ms
 * later on average, and one poll serves 64 loading engines where 64 ticks
 * each asked (bench figure 16).
 */
export const LISTEN_POLL_MS = 20;

/** Per port, the waits untilPortListed ends once a dump lists it. */
const listedWaits = new Map<number, Set<() => void>>();
/** Whether a poll is scheduled (pollListed). */
let polling = false;

/**
 * Resolves once a dump of the listening ports taken after the call lists
 * `port`, after `maxMs`, or when `signal` aborts, whichever comes first:
 * the readiness wait's pause between ticks while its engine loads. Where
 * netlink cannot be asked, only `maxMs` or the signal end it.
 */
export function untilPortListed(port: number, maxMs: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const waits = listedWaits.get(port) ?? new Set<() => void>();
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      waits.delete(done);
      if (waits.size === 0 && listedWaits.get(port) === waits) listedWaits.delete(port);
      resolve();
    };
    const timer = setTimeout(done, maxMs);
    signal.addEventListener('abort', done, { once: true });
    if (signal.aborted) return done();
    if (netlinkUnsupported !== undefined) return;
    waits.add(done);
    listedWaits.set(port, waits);
    if (!polling) setTimeout(pollListed, LISTEN_POLL_MS);
    polling = true;
  });
}

function pollListed(): void {
  polling = false;
  const ports = listedWaits.size > 0 ? listeningPortsNow() : undefined;
  // No dump (netlink refused meanwhile): each wait ends at its own maxMs.
  if (ports !== undefined) for (const [port, waits] of listedWaits) if (ports.has(port)) for (const done of [...waits]) done();
  if (ports === undefined || listedWaits.size === 0) return;
  polling = true;
  setTimeout(pollListed, LISTEN_POLL_MS);
}

/** Limit for the connect that asks whether anything listens; the kernel answers it, in microseconds, on loopback. */
const ACCEPT_CHECK_TIMEOUT_MS = 1000;

/**
 * Whether anything accepts a TCP connection on 127.0.0.1:`port`, the
 * address the probes dial. A refused connect is answered by the kernel:
 * nothing reaches a loading engine, which has no socket yet. It costs the
 * agent tens of microseconds, where reading /proc/net/tcp6 makes the kernel
 * walk its whole established-socket hash (about 2 ms here, more on a node
 * with more memory) even when it lists nothing. Anything but a refusal
 * (accepted, timed out, another error) is "maybe": the tables decide.
 */
function somethingAccepts(port: number, hold?: { socket?: Socket }): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    const done = (accepts: boolean) => {
      clearTimeout(timer);
      socket.off('error', onError);
      socket.destroy();
      resolve(accepts);
    };
    const onError = (err: Error) => done(errnoCode(err) !== 'ECONNREFUSED');
    const timer = setTimeout(() => done(true), ACCEPT_CHECK_TIMEOUT_MS);
    socket.once('connect', () => {
      if (!hold) return done(true);
      // Kept for the caller (PortOwnerAsk.keepConnection). An error before a
      // request is on it (the engine reset it) must not be an uncaught one:
      // the request on it, or the fresh one instead (tick-connection.ts), says.
      clearTimeout(timer);
      socket.off('error', onError);
      socket.on('error', () => undefined);
      hold.socket = socket;
      resolve(true);
    });
    socket.once('error', onError);
  });
}

/** Why netlink could not be asked, once it failed: the tables are read from then on. */
let netlinkUnsupported: string | undefined;

/**
 * The sockets listening on `port`: netlink's LISTEN-only dump for that one
 * port (netlink-listeners.ts) where the kernel answers it, else the
 * tables, shared (listeningNow).
 */
async function listenersOn(port: number): Promise<ListeningSocket[]> {
  if (netlinkUnsupported === undefined) {
    const asked = netlinkListeners(port);
    if (!('unsupported' in asked)) return asked;
    netlinkUnsupported = asked.unsupported;
  }
  return (await listeningNow()).filter((s) => s.port === port);
}

/** The LISTEN sockets of the host, read at most once per LISTEN_TABLE_TTL_MS whoever asks. */
function listeningNow(): Promise<ListeningSocket[]> {
  const now = performance.now();
  if (shared && now - shared.atMs < LISTEN_TABLE_TTL_MS) return shared.sockets;
  const sockets = readListeningSockets();
  shared = { atMs: now, sockets };
  // A failed read must not be served to the next callers for the TTL.
  sockets.catch(() => {
    if (shared?.sockets === sockets) shared = undefined;
  });
  return sockets;
}

/**
 * A check of who listens on `target.port`, for the readiness wait, the
 * health watch and drain's in-flight reading: whoever binds an engine's port
 * first answers the agent's probes, a local unprivileged user included, and
 * an answer from that socket made the shard READY (review finding 2).
 *
 * Cheap on purpose, since it runs on every readiness tick and health
 * probe: while nothing listens it is one refused connect (see
 * somethingAccepts); once something does, the kernel's list of the port's
 * listeners (listenersOn). The processes and their fds are examined only
 * when the set of listening sockets changes, and the verdict is kept for
 * that set (a socket's inode is unique while it exists, so the same set
 * means the same owners): a READY engine that closes its listener and a
 * squatter that binds after it are seen at the next probe. A port found
 * squatted is not connected to again: the listeners alone say when the
 * squatter is gone.
 */
export function portOwnerCheck(target: PortOwnerTarget): PortOwnerCheck {
  let known: { key: string; verdict: PortOwner; atMs: number } | undefined;
  const decide = async (opts: PortOwnerAsk | undefined, hold: { socket?: Socket } | undefined): Promise<PortOwner> => {
    if (known?.verdict.owner !== 'other') {
      // No listener on the port at any address: a connect would be refused,
      // which the shared dump says without one. A port listed goes on to the
      // connect, as before (a listener on another address only is refused too).
      if (opts?.loading && listeningPortsNow()?.has(target.port) === false) {
        known = undefined;
        return { owner: 'nobody' };
      }
      // A squatter only on [::1]:P is not reached either: whatever the probes would talk to, nothing is there.
      if (!(await somethingAccepts(target.port, hold))) {
        // The sockets the verdict was about are gone: whoever binds next is judged afresh.
        known = undefined;
        return { owner: 'nobody' };
      }
      const stale = performance.now() - (known?.atMs ?? 0) >= ENGINE_RECHECK_MS;
      if (known?.verdict.owner === 'engine' && netlinkUnsupported !== undefined && !stale) return known.verdict;
    }
    let sockets: ListeningSocket[];
    try {
      sockets = await listenersOn(target.port);
    } catch (err) {
      // No /proc/net/tcp (a restricted container, no procfs): nothing can be
      // told, and refusing READY would fail every healthy engine on such a
      // host. The probe then decides alone, as before the check existed;
      // squatting is undetectable there, and the caller says so.
      return { owner: 'unknown', why: `cannot read /proc/net/tcp: ${err instanceof Error ? err.message : String(err)}` };
    }
    if (sockets.length === 0) return { owner: 'nobody' };
    const key = sockets
      .map((s) => s.inode)
      .sort()
      .join(',');
    if (known?.key === key) {
      known.atMs = performance.now();
      return known.verdict;
    }
    const verdict = await judge(target, sockets);
    known = { key, verdict, atMs: performance.now() };
    return verdict;
  };
  const check: PortOwnerCheck = async (opts) => {
    const hold = opts?.keepConnection ? ({} as { socket?: Socket }) : undefined;
    let verdict: PortOwner;
    try {
      verdict = await decide(opts, hold);
    } catch (err) {
      hold?.socket?.destroy();
      throw err;
    }
    if (hold?.socket === undefined) return verdict;
    // A fresh object: the verdict kept in `known` never carries a connection.
    if (verdict.owner === 'engine') return { owner: 'engine', connection: hold.socket };
    hold.socket.destroy();
    return verdict;
  };
  check.untilListed = (maxMs, signal) => untilPortListed(target.port, maxMs, signal);
  return check;
}

async function judge(target: PortOwnerTarget, sockets: ListeningSocket[]): Promise<PortOwner> {
  // The leader first: vLLM's and SGLang's API servers listen in it, and
  // then the scan of every process for the group's members (milliseconds,
  // on the way to READY) is not needed.
  const leader = socketInodesOf(target.pid);
  if (leader && sockets.every((s) => leader.has(s.inode))) return { owner: 'engine' };
  const members = new Set((target.unit ? await cgroupMembers(target.pid) : undefined) ?? listProcessGroup(target.pgid));
  members.add(target.pid);
  const held = new Set<string>(leader);
  let unreadable = leader === undefined;
  for (const pid of members) {
    if (pid === target.pid) continue;
    const inodes = socketInodesOf(pid);
    if (inodes === undefined) unreadable = true;
    else for (const i of inodes) held.add(i);
  }
  const engineUid = effectiveUid(target.pid);
  // Every listener must be the engine's, not just one: the probe connects to
  // 127.0.0.1, and a squatter on 127.0.0.1:P or [::1]:P beside an engine on
  // another address is the one that answers it.
  const foreign = sockets.filter((s) => {
    if (held.has(s.inode)) return false;
    // An engine process whose fds cannot be read (an agent that is not root,
    // /proc mounted hidepid) cannot be ruled out as the holder: then the
    // socket's uid decides. A squatter with the engine's own uid could do
    // anything to the engine already; one with another uid is still caught.
    return !(unreadable && engineUid !== undefined && s.uid === engineUid);
  });
  const first = foreign[0];
  if (first === undefined) return { owner: 'engine' };
  const all = await listeningSocketOwners(target.port).catch(() => []);
  const pid = all.find((p) => !members.has(p));
  const who = pid === undefined ? `uid ${first.uid}` : `pid ${pid}, uid ${first.uid}`;
  return { owner: 'other', pid, uid: first.uid, reason: `port ${target.port} held by another process (${who})` };
}
