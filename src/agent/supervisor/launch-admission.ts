import type { StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import type { BoundPort } from '../engines/shard-bound-ports.js';
import { failure, LlmgwError } from '../../lib/errors.js';
import { isTerminal } from '../../lib/shard-states.js';
import type { ShardRunner } from './shard/shard-runner.js';

/**
 * One launch per GPU of an 8-GPU node at once; more wait their turn. Each
 * launch costs an executable lookup, a port probe and a fork: a control
 * plane sending thousands of starts must not turn them into thousands of
 * concurrent forks (finding 5 of the security review launched 20 with no
 * bound).
 */
export const DEFAULT_MAX_CONCURRENT_LAUNCHES = 8;
/**
 * Starts in progress (each holding its reservation) beyond which a start is
 * refused: far more than any node has shards, so only a flood reaches it.
 */
export const MAX_PENDING_LAUNCHES = 64;

/** What shards hold exclusively, each with the id of the shard holding it. */
export interface Reservations {
  gpus: ReadonlyMap<number, string>;
  ports: ReadonlyMap<number, string>;
}

export interface LaunchAdmissionOptions {
  /** The registry's shard table: what its runners hold is held. */
  runners: ReadonlyMap<string, ShardRunner>;
  /** Aborted by the registry's close(): a launch waiting for a slot gives up. */
  closed: AbortSignal;
  /** Default DEFAULT_MAX_CONCURRENT_LAUNCHES (8). */
  maxConcurrentLaunches?: number;
  /** Default MAX_PENDING_LAUNCHES (64). */
  maxPendingLaunches?: number;
  /** The ports of this node a shard's engine binds (shardBoundPorts); by default its http_port alone. */
  boundPorts?: (spec: StartShard) => BoundPort[];
}

/** A shard's http_port, the one port every engine binds. */
const httpPortOnly = (spec: StartShard): BoundPort[] => (spec.httpPort > 0 ? [{ port: spec.httpPort, what: `http_port ${spec.httpPort}` }] : []);

/** What reserve() found: the shard running, a launch of it in progress, or a new launch it claimed. */
export type Reserved =
  | { kind: 'running'; runner: ShardRunner }
  | { kind: 'pending'; launch: Promise<ShardRunner | undefined> }
  | { kind: 'new'; launch: Promise<ShardRunner>; settled: Promise<ShardRunner | undefined> };

/**
 * Which launches may begin: the launches in progress by shard id (the one
 * place concurrent starts of an id become one process), what they claim
 * (GPUs, port) from before their first await, and the bound on launches
 * validating or launching at once.
 */
export class LaunchAdmission {
  /** Launches in progress; undefined when it was refused. */
  private readonly launching = new Map<string, Promise<ShardRunner | undefined>>();
  /**
   * The specs of launches in progress, claimed before any await: what they
   * will hold is held from that moment, not from when their runner reaches
   * the table.
   */
  private readonly claims = new Map<string, StartShard>();
  /** Launches past the concurrency bound, waiting for a slot, first come first served. */
  private readonly slotWaiters: ((granted: boolean) => void)[] = [];
  private activeLaunches = 0;
  private readonly maxConcurrentLaunches: number;
  private readonly maxPendingLaunches: number;
  private readonly boundPorts: (spec: StartShard) => BoundPort[];

  constructor(private readonly opts: LaunchAdmissionOptions) {
    this.maxConcurrentLaunches = opts.maxConcurrentLaunches ?? DEFAULT_MAX_CONCURRENT_LAUNCHES;
    this.maxPendingLaunches = opts.maxPendingLaunches ?? MAX_PENDING_LAUNCHES;
    this.boundPorts = opts.boundPorts ?? httpPortOnly;
  }

  /** The launch of `shardId` in progress, if any. */
  pending(shardId: string): Promise<ShardRunner | undefined> | undefined {
    return this.launching.get(shardId);
  }

  /** Whether a launch of `shardId` is in progress (its logs are kept). */
  isClaimed(shardId: string): boolean {
    return this.claims.has(shardId);
  }

  /**
   * The synchronous step before any `await` of a start: finds a shard
   * already running or being launched, refuses GPUs or a port another shard
   * holds or is launching on, and otherwise claims the id, its GPUs and its
   * port by starting `launch` (given the terminal runner it replaces, if
   * any). One step with no await in it, so that two starts can never both
   * pass: checked across awaits, 20 concurrent starts on one GPU and one
   * port all passed and launched 20 engines (finding 5 of the security review).
   */
  reserve(spec: StartShard, launch: (previous: ShardRunner | undefined) => Promise<ShardRunner>): Reserved {
    if (this.opts.closed.aborted) throw failure('the supervisor is closed');
    const id = spec.shardId;
    const existing = this.opts.runners.get(id);
    if (existing && !isTerminal(existing.currentState)) return { kind: 'running', runner: existing };
    const pending = this.pending(id);
    if (pending) return { kind: 'pending', launch: pending };
    const { launch: launched, settled } = this.claim(spec, () => launch(existing));
    return { kind: 'new', launch: launched, settled };
  }

  /**
   * Refuses GPUs or a port another shard holds or is launching on (any
   * port its engine binds: boundPorts), or one
   * launch too many; otherwise claims them and starts `launch`. Synchronous,
   * so that it agrees with the caller's checks made just before it.
   */
  claim(spec: StartShard, launch: () => Promise<ShardRunner>): { launch: Promise<ShardRunner>; settled: Promise<ShardRunner | undefined> } {
    const id = spec.shardId;
    const held = this.holdings(id);
    for (const g of spec.gpuIndices) {
      const holder = held.gpus.get(g);
      if (holder !== undefined) throw failure(`GPU ${g} is held by shard ${holder}; stop it first or place this shard elsewhere`);
    }
    for (const mine of this.boundPorts(spec)) {
      const theirs = held.ports.get(mine.port);
      if (theirs === undefined) continue;
      if (theirs.what === mine.what) throw failure(`${mine.what} is already in use on this node by shard ${theirs.shard}; use another port`);
      // A port an engine derives (SGLang's DP attention: shard-bound-ports.ts) would collide at its start, 30 s in.
      const subject = mine.what.includes(', which ') ? `${mine.what},` : mine.what;
      throw failure(`${subject} is already in use on this node by shard ${theirs.shard} (${theirs.what}); give the two shards ports at least 14 apart`);
    }
    if (this.launching.size >= this.maxPendingLaunches) {
      throw failure(`${this.launching.size} shard starts are in progress already, the most this agent takes at once; retry once some have settled`);
    }
    this.claims.set(id, spec);
    const launched = launch();
    // Repeats wait for this one; only its own caller hears why it was refused.
    const settled = launched.then(
      (r) => r,
      () => undefined,
    );
    this.launching.set(id, settled);
    return { launch: launched, settled };
  }

  /** Ends the claim of `settled`, the launch claim() started (a newer one of the id keeps its own). */
  release(shardId: string, settled: Promise<ShardRunner | undefined>): void {
    if (this.launching.get(shardId) !== settled) return;
    this.launching.delete(shardId);
    this.claims.delete(shardId);
  }

  /**
   * GPUs and ports held by shards other than `exceptShardId`: every launch in
   * progress, and every shard whose engine may still run, whatever its state
   * (a FAILED one that never became ready is left running until stopped, and
   * a second engine on its GPUs would fail after minutes of loading). Read
   * synchronously, so it agrees with claim().
   */
  reservations(exceptShardId = ''): Reservations {
    const { gpus, ports } = this.holdings(exceptShardId);
    return { gpus, ports: new Map([...ports].map(([port, h]) => [port, h.shard])) };
  }

  /** reservations(), with how each port's holder uses it. */
  private holdings(exceptShardId: string): { gpus: Map<number, string>; ports: Map<number, { shard: string; what: string }> } {
    const gpus = new Map<number, string>();
    const ports = new Map<number, { shard: string; what: string }>();
    const hold = (id: string, spec: StartShard) => {
      if (id === exceptShardId) return;
      for (const g of spec.gpuIndices) gpus.set(g, id);
      for (const p of this.boundPorts(spec)) ports.set(p.port, { shard: id, what: p.what });
    };
    for (const r of this.opts.runners.values()) if (!isTerminal(r.currentState) || r.running) hold(r.shardId, r.spec);
    for (const [id, spec] of this.claims) hold(id, spec);
    return { gpus, ports };
  }

  /**
   * Waits until fewer than maxConcurrentLaunches launches validate or
   * launch, and counts this one in; throws (taking nothing) once the
   * registry is closed, so that no start waits for ever. A slot given back
   * goes straight to the launch waiting longest (releaseSlot): were the
   * woken waiter to check again, a start arriving in the same moment would
   * take the slot and send it to the back of the queue.
   */
  async takeSlot(): Promise<void> {
    if (this.activeLaunches < this.maxConcurrentLaunches && this.slotWaiters.length === 0) {
      this.activeLaunches++;
      return;
    }
    const granted = await new Promise<boolean>((resolve) => this.slotWaiters.push(resolve));
    if (!granted) throw failure('the supervisor is closed');
  }

  /** Gives back the slot takeSlot() took: to the launch waiting longest, which then holds it, or to no one. */
  releaseSlot(): void {
    const next = this.slotWaiters.shift();
    if (next) next(true);
    else this.activeLaunches--;
  }

  /** Once the registry is closed, wakes every launch waiting for a slot with none: each throws that it is closed. */
  wakeAll(): void {
    if (!this.opts.closed.aborted) return;
    for (const wake of this.slotWaiters.splice(0)) wake(false);
  }
}

/**
 * A start that joined another start of the same shard id, which was refused.
 * The first start's caller reports the refusal; this one has nothing to add,
 * and a second FAILED report for one refusal would only be noise.
 */
export class RepeatedStartError extends LlmgwError {
  readonly shardId: string;

  constructor(shardId: string) {
    super('failure', `shard ${shardId}: the start this repeat joined was refused`);
    this.shardId = shardId;
  }
}
