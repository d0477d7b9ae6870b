import { LlmgwError } from '../../lib/errors.js';

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
