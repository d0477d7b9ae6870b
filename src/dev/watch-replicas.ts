import type { ControlPlane } from '../control/control-plane.js';
import type { ReplicaView } from '../control/replica-view.js';
import type { ShardStatus } from '../gen/llmgw/v1/agent_pb.js';
import { shardLogPath } from '../lib/shard-layout.js';
import { isUnplannedEnd, stateName } from '../lib/shard-states.js';
import { curlLine } from './render-dev-up-summary.js';

/** Failures in a row, none after a stable run, that make a crash loop worth its own line. */
export const CRASH_LOOP_FAILURES = 3;
/**
 * A generation that served this long before failing ends a streak. Being
 * READY alone does not: an engine that answers for a second and then dies
 * (a bad model file read lazily) is the crash loop the operator must see.
 */
export const STABLE_RUN_MS = 30_000;

/** What dev up holds of the watch: the banner's replicas given once printed, and the unsubscribe. */
export interface ReplicaWatch {
  /** The banner is out with these replicas: lines held until now are said, and a new URL is a move from then on. */
  printed(replicas: ReplicaView[]): void;
  stop(): void;
}

/**
 * What changes `dev up`'s banner: a replica placed again after a failure
 * gets a new port, so its URL and curl line are printed anew; each failure
 * is a line with its exit status; a replica that keeps failing is announced
 * as a crash loop. Subscribed before the first placement, so a failure while
 * dev up was still starting (an engine that answers for a second and dies,
 * on a loaded machine before the banner is out) counts in its streak; its
 * line is held until the banner is printed.
 */
export function watchReplicas(
  cp: ControlPlane,
  opts: {
    logDir: string;
    say: (line: string) => void;
    /** Each failure, and whether it made a crash loop: dev up then keeps its temp dir for the logs it named. */
    onFailure?: (failure: { replicaId: string; shardId: string; crashLooping: boolean }) => void;
  },
): ReplicaWatch {
  const url = new Map<string, string | undefined>();
  const failures = new Map<string, number>();
  const readyAt = new Map<string, number>();
  let held: string[] | undefined = [];
  const say = (line: string) => (held ? held.push(line) : opts.say(line));
  const onReady = (r: ReplicaView) => {
    const n = failures.get(r.id) ?? 0;
    readyAt.set(r.id, Date.now());
    // Before the banner, the banner itself says where a replica is.
    if (held) return;
    if (r.url === url.get(r.id)) {
      if (n > 0) say(`${r.id} is ready again at ${r.url} (generation ${r.generation}, after ${n} failure(s))`);
      return;
    }
    say(`${r.id} moved: now ${r.url} (was ${url.get(r.id) ?? 'not ready'}), generation ${r.generation}, shard ${r.shards.map((s) => s.shardId).join(', ')}:`);
    say(`  ${curlLine(r.url ?? '', r.servedModelName)}`);
    url.set(r.id, r.url);
  };
  const onStatus = (_nodeId: string, st: ShardStatus) => {
    // STOPPED is an orderly end (a stop sent, dev up's own teardown); only these are failures.
    if (!isUnplannedEnd(st.state)) return;
    const since = readyAt.get(st.replicaId);
    const stable = since !== undefined && Date.now() - since >= STABLE_RUN_MS;
    const n = stable ? 1 : (failures.get(st.replicaId) ?? 0) + 1;
    failures.set(st.replicaId, n);
    const status = st.exitCode ? `exit status ${st.exitCode}` : 'no exit status';
    const inARow = n > 1 ? `, failure ${n} in a row` : '';
    say(`${st.replicaId}: shard ${st.shardId} ${stateName(st.state)} (${status}${inARow})${st.error ? `: ${st.error}` : ''}; the control plane places it again`);
    // Once per streak: a loop that runs all night must not print this every few seconds.
    if (n === CRASH_LOOP_FAILURES) {
      say(`${st.replicaId} is crash-looping: ${n} failures in a row, the last with ${status}; its log: ${shardLogPath(opts.logDir, st.shardId)}`);
    }
    opts.onFailure?.({ replicaId: st.replicaId, shardId: st.shardId, crashLooping: n >= CRASH_LOOP_FAILURES });
  };
  cp.on('replica-ready', onReady);
  cp.on('shard-status', onStatus);
  return {
    printed: (replicas) => {
      for (const r of replicas) {
        url.set(r.id, r.url);
        if (!readyAt.has(r.id)) readyAt.set(r.id, Date.now());
      }
      const lines = held ?? [];
      held = undefined;
      for (const line of lines) opts.say(line);
    },
    stop: () => {
      cp.off('replica-ready', onReady);
      cp.off('shard-status', onStatus);
    },
  };
}
