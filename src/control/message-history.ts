import type { AgentMessage } from '../gen/llmgw/v1/agent_pb.js';

/** Messages kept per node for messages(); a long dev run must not grow without bound. */
export const MESSAGE_HISTORY_LIMIT = 10_000;

/** Every message each node sent, in order, up to MESSAGE_HISTORY_LIMIT per node (newest kept). */
export class MessageHistory {
  readonly #messages = new Map<string, AgentMessage[]>();

  record(nodeId: string, m: AgentMessage): void {
    let list = this.#messages.get(nodeId);
    if (!list) {
      list = [];
      this.#messages.set(nodeId, list);
    }
    list.push(m);
    if (list.length > MESSAGE_HISTORY_LIMIT) list.splice(0, list.length - MESSAGE_HISTORY_LIMIT);
  }

  /** A copy: the caller may keep it while more messages arrive. */
  of(nodeId: string): AgentMessage[] {
    return [...(this.#messages.get(nodeId) ?? [])];
  }
}
