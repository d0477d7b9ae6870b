import type { Agent } from '../agent.js';

/**
 * What the admin socket may ask of the agent: reads, plus the three acts an
 * operator can take (follow a log, adopt, drain). Nothing here stops an
 * engine; that stays the control plane's decision.
 */
export type AdminBackend = Pick<
  Agent,
  | 'nodeId'
  | 'version'
  | 'startedAtMs'
  | 'connectionStatus'
  | 'currentInventory'
  | 'gpuHealth'
  | 'engineAccounts'
  | 'foreignMemoryShare'
  | 'shards'
  | 'shard'
  | 'logLines'
  | 'previousLogLines'
  | 'followLog'
  | 'inFlight'
  | 'adoptNow'
  | 'drainShard'
  | 'cancelDrainShard'
>;
