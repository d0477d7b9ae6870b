import { timestampFromMs } from '@bufbuild/protobuf/wkt';
import type { AgentEvent } from '../gen/llmgw/v1/admin_pb.js';
import { failure } from '../lib/errors.js';
import { openAdminClient } from './open-admin-client.js';

export interface CtlEventsOptions {
  socket: string;
  follow: boolean;
  /** Only events at or after this time (ms since the epoch); 0: all the agent keeps. */
  sinceMs: number;
  /** Ctrl-C: ends a follow, which is then a success. */
  signal: AbortSignal;
  /** Each event, as it arrives. */
  write: (e: AgentEvent) => void;
}

/**
 * The agent's recent state changes, and with `follow` each new one as it
 * happens until Ctrl-C. The agent pushes an event the moment it records it,
 * so nothing here polls. Unlike `ctl logs`, there is nothing to read with
 * the agent down: the ring lives in its memory.
 */
export async function ctlEvents(o: CtlEventsOptions): Promise<void> {
  const admin = await openAdminClient(o.socket);
  try {
    const req = { follow: o.follow, since: o.sinceMs > 0 ? timestampFromMs(o.sinceMs) : undefined };
    for await (const res of admin.client.events(req, { signal: o.signal })) {
      for (const e of res.events) o.write(e);
    }
    if (o.follow && !o.signal.aborted) throw failure('the agent stopped; no more events will come from it');
  } catch (err) {
    if (o.signal.aborted) return;
    throw admin.explain(err);
  } finally {
    admin.close();
  }
}
