import type { StatusResponseJson } from '../gen/llmgw/v1/admin_pb.js';
import { ctlStatus } from './ctl-status.js';
import type { ShardFilter } from './filter-status-shards.js';
import { type ResolveCtlPathsOptions, resolveCtlPaths } from './resolve-ctl-paths.js';

export interface CtlStatusOutput {
  /** What `--json` prints. */
  status: StatusResponseJson;
  /** The human form; absent with `--json`, which never needs it. */
  text?: string;
}

/**
 * All of `llmgw ctl status` but parsing and printing: find the socket, ask
 * the agent, render. Both the oclif command and bin/run.js's fast path (which
 * answers without loading oclif) call it, so they cannot drift apart.
 */
export async function runCtlStatus(where: ResolveCtlPathsOptions, json: boolean, filter: ShardFilter = {}): Promise<CtlStatusOutput> {
  const { socket } = await resolveCtlPaths(where);
  const status = await ctlStatus(socket, filter);
  if (json) return { status };
  const { renderStatus } = await import('./render-status.js');
  return { status, text: renderStatus(status, Date.now(), { endedHidden: !filter.all && !filter.states?.length }) };
}
