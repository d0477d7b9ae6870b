import type { StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import type { EngineConfig, EngineUser } from '../config/agent-config.js';

/**
 * The account a shard's engine runs as: its profile's own in
 * engines.<name>.profile_users, else engines.<name>.user; undefined runs it
 * as the agent's (refused as root without allow_root). Every cache an
 * engine writes is its account's (engines/<uid>/<engine>/<model>, 0700),
 * and every engine of one account may write every leaf of that account:
 * one tenant's engine wrote a Triton cuda_utils.so into another model's
 * cache of the same account, which that model's engine then loads
 * (security review 4, S9). Profiles listed here share nothing an engine
 * writes with other accounts.
 */
export function shardUser(config: Pick<EngineConfig, 'user' | 'profileUsers'>, spec: StartShard): EngineUser | undefined {
  const profile = spec.profile?.name ?? '';
  const own = profile !== '' && config.profileUsers && Object.hasOwn(config.profileUsers, profile) ? config.profileUsers[profile] : undefined;
  return own ?? config.user;
}
