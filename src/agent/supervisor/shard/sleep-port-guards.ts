import type { StartShard } from '../../../gen/llmgw/v1/agent_pb.js';
import { errorMessage, failure } from '../../../lib/errors.js';
import type { Logger } from '../../../lib/logger.js';
import { isEngineName } from '../../../lib/engine-names.js';
import { isTerminal } from '../../../lib/shard-states.js';
import type { AgentConfig } from '../../config/agent-config.js';
import { ENGINE_CATALOG } from '../../engines/engine-catalog.js';
import type { LaunchPlan } from '../../engines/launch-plan.js';
import { servesHttp } from '../../engines/shard-launch.js';
import type { ShardSnapshot, ShardTransition } from './shard-snapshot.js';

/*
 * The engine's dev endpoints the agent's alone (security review 4, S6;
 * issue 48 item 4). A shard started with sleep_mode serves, on its API
 * port and with no key:
 *  - vLLM: /sleep, /wake_up, /collective_rpc, /reset_prefix_cache and the
 *    other dev routes, mounted with VLLM_SERVER_DEV_MODE=1
 *    (V:vllm/entrypoints/launchers/api_server/routers.py:34-37 at 2f41c894;
 *    the dev rpc router's attach_router returns early without dev mode and
 *    /collective_rpc calls any worker method by name), which its API key
 *    does not guard: the key's middleware checks /v1 paths only
 *    (V:vllm/entrypoints/serve/middleware/authenticate.py:11, 59);
 *  - SGLang: /release_memory_occupation and /resume_memory_occupation
 *    (S:python/sglang/srt/entrypoints/http_server.py:1482-1503 at v0.5.18),
 *    ADMIN_OPTIONAL routes that any caller reaches when no key is set
 *    (S:python/sglang/srt/utils/auth.py decide_request_auth: "no keys
 *    configured: allow"); an admin key set in its argv is no secret, since
 *    every local user reads /proc/<pid>/cmdline.
 * Any local user slept a shard, then ended it with /collective_rpc
 * reload_weights (review 4, t-s5-s6-sleep.sh).
 *
 * The endpoints cannot be split from the router's: both are one port, one
 * HTTP app. vLLM's --uds serves a Unix socket instead of TCP, not beside it
 * (launcher.py: `if args.uds: create_server_unix_socket … else
 * create_server_socket`), so a socket only the agent opens would put the
 * router behind a forwarder; a network namespace would put it behind NAT.
 * What is left is who connects: a rule on this host's loopback output
 * (NftPortGuard) refuses connections to the port from local processes of
 * any uid but the agent's and the engine's own (SGLang's launcher sends
 * its warm-up to its own port), while requests from other hosts, the
 * router's, arrive through the input path untouched. Reaching the port
 * from the network stays the operator's firewall to set, as before.
 */

/** What guards a port: NftPortGuard, or a test's stand-in. */
export interface PortGuard {
  guard(port: number, uids: readonly number[]): Promise<void>;
  release(port: number): Promise<void>;
}

export interface SleepPortGuardsOptions {
  engines: AgentConfig['engines'];
  /** The agent's uid: it sleeps and wakes the engine. */
  agentUid: number;
  guard: PortGuard;
  /** The shards the agent knows: a port is released only once no live shard of it is left there. */
  shards: () => ShardSnapshot[];
  log: Logger;
}

/** What an engine's sleep opens without a key (its wing says); undefined for one whose sleep opens nothing to guard. */
function opened(engine: string): string | undefined {
  return isEngineName(engine) ? ENGINE_CATALOG[engine].keylessSleepEndpoints : undefined;
}

/** A shard whose port must be the agent's and the engine's alone. */
export function needsSleepPortGuard(spec: StartShard): boolean {
  return spec.profile?.sleepMode === true && opened(spec.profile.engine) !== undefined && servesHttp(spec) && spec.httpPort > 0;
}

export class SleepPortGuards {
  /** The shard each port was last guarded for by this process: a late release of an ended shard's port must not lift a new one's. */
  readonly #owner = new Map<number, string>();

  constructor(private readonly opts: SleepPortGuardsOptions) {}

  /**
   * Before the engine is launched (it binds its port at once): guards the
   * port of a sleep-mode shard, or throws the start's refusal in one line.
   * Never runs open on a failure: only engines.<name>.sleep_port_guard:
   * none, the operator's word, does.
   */
  async beforeLaunch(spec: StartShard, plan: LaunchPlan): Promise<void> {
    if (!needsSleepPortGuard(spec)) {
      await this.#releaseStale(spec);
      return;
    }
    const engine = spec.profile?.engine as 'vllm' | 'sglang';
    const fields = { shard: spec.shardId, replica: spec.replicaId, port: spec.httpPort };
    if (this.opts.engines[engine]?.sleepPortGuard === 'none') {
      this.opts.log.warn(fields, `sleep mode opens ${opened(engine)} on the engine's port to every local user: engines.${engine}.sleep_port_guard is none`);
      return;
    }
    const engineUid = plan.user?.uid ?? this.opts.agentUid;
    this.#owner.set(spec.httpPort, spec.shardId);
    try {
      await this.opts.guard.guard(spec.httpPort, [this.opts.agentUid, engineUid]);
    } catch (err) {
      throw failure(
        `shard ${spec.shardId}: sleep_mode opens ${opened(engine)} on port ${spec.httpPort} without a key, and the agent could not keep that port from other local users (${errorMessage(err)}); run the agent as root with nftables installed, or set engines.${engine}.sleep_port_guard: none where no other local user runs`,
      );
    }
    this.opts.log.info({ ...fields, uids: [...new Set([this.opts.agentUid, engineUid])] }, "sleep mode: the engine's port is refused to local users but the agent's and the engine's (nftables)");
  }

  /**
   * A start without sleep mode on a port a guard was left on (its shard
   * ended while no agent ran, so no reaction lifted it): lifted first, or
   * the engine's own calls to its port (SGLang's warm-up) and local
   * clients would be refused. Never refuses the start: a node without nft
   * has no guard to lift.
   */
  async #releaseStale(spec: StartShard): Promise<void> {
    if (!servesHttp(spec) || spec.httpPort <= 0 || this.#owner.has(spec.httpPort)) return;
    await this.opts.guard.release(spec.httpPort).catch((err) => this.opts.log.warn({ shard: spec.shardId, port: spec.httpPort, err: errorMessage(err) }, 'a guard left on the port of a new shard was not lifted'));
  }

  /**
   * A shard's transition (a named reaction): once a guarded shard has ended
   * and its engine is gone, its port's guard is lifted, unless another
   * live shard holds the port now (a release must not open a new engine's).
   */
  readonly follow = (t: ShardTransition): void => {
    const spec = t.shard.spec;
    if (!isTerminal(t.to) || t.shard.running || !needsSleepPortGuard(spec)) return;
    if (this.opts.engines[spec.profile?.engine as 'vllm' | 'sglang']?.sleepPortGuard === 'none') return;
    const port = spec.httpPort;
    const owner = this.#owner.get(port);
    if (owner !== undefined && owner !== spec.shardId) return;
    this.#owner.delete(port);
    const holder = this.opts.shards().find((s) => s.spec.shardId !== spec.shardId && s.spec.httpPort === port && (!isTerminal(s.state) || s.running));
    if (holder) return;
    this.opts.guard.release(port).catch((err) => this.opts.log.warn({ shard: spec.shardId, port, err: errorMessage(err) }, "the guard of an ended shard's port was not lifted"));
  };
}
