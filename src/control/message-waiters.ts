import type { AgentMessage } from '../gen/llmgw/v1/agent_pb.js';

interface Waiter {
  nodeId: string;
  pred: (m: AgentMessage) => boolean;
  resolve: (m: AgentMessage) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

/** Callers waiting for a message from a node that matches their predicate. */
export class MessageWaiters {
  readonly #waiters = new Set<Waiter>();

  /** Resolves with the first message from nodeId, offered from now on, that pred accepts. */
  wait(nodeId: string, pred: (m: AgentMessage) => boolean, timeoutMs: number): Promise<AgentMessage> {
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        nodeId,
        pred,
        resolve,
        reject,
        timer: setTimeout(() => {
          this.#waiters.delete(waiter);
          reject(new Error(`timed out after ${timeoutMs} ms waiting for a matching message from node ${nodeId}`));
        }, timeoutMs),
      };
      this.#waiters.add(waiter);
    });
  }

  /** Settles the waiters of nodeId that m satisfies; a predicate that throws rejects its own waiter only. */
  offer(nodeId: string, m: AgentMessage): void {
    for (const w of [...this.#waiters]) {
      if (w.nodeId !== nodeId) continue;
      let match: boolean;
      try {
        match = w.pred(m);
      } catch (err) {
        this.#waiters.delete(w);
        clearTimeout(w.timer);
        w.reject(err instanceof Error ? err : new Error(String(err)));
        continue;
      }
      if (match) {
        this.#waiters.delete(w);
        clearTimeout(w.timer);
        w.resolve(m);
      }
    }
  }

  /** Rejects every waiter: nothing will arrive for them any more. */
  rejectAll(why: (nodeId: string) => string): void {
    for (const w of this.#waiters) {
      clearTimeout(w.timer);
      w.reject(new Error(why(w.nodeId)));
    }
    this.#waiters.clear();
  }
}
