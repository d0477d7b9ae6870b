import { mkdirSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { type AdapterSpec, AdapterSpecSchema } from '../../gen/llmgw/v1/agent_pb.js';
import { writeFileAtomic } from '../../lib/write-file-atomic.js';

/*
 * A shard's desired adapter set once a SetAdapters (or `ctl adapters`)
 * changed it from its StartShard's (issue 53): kept beside the shard's state
 * file so that an agent restarted under its engine reconciles to it without
 * asking the control plane. Its own file, not a field of the state file:
 * that file has one writer (the shard's runner), and a second would race
 * it. Under `<state_dir>/adapters/`, not `shards/`, whose every `<id>.json`
 * is read as a state file. Callers check the shard id first (it names the file).
 */

/** `<state_dir>/adapters`: the node's adapter ledger and answers, and each shard's desired set. */
export const adapterStateDir = (stateDir: string): string => join(stateDir, 'adapters');

/** `<state_dir>/adapters/shards/<id>.json`. */
export const desiredAdaptersPath = (stateDir: string, shardId: string): string => join(adapterStateDir(stateDir), 'shards', `${shardId}.json`);

/** The set kept for the shard; undefined when none was kept (its StartShard's holds) or the file is unreadable. */
export function readDesiredAdapters(stateDir: string, shardId: string): AdapterSpec[] | undefined {
  try {
    const f = JSON.parse(readFileSync(desiredAdaptersPath(stateDir, shardId), 'utf8')) as { version?: number; adapters?: unknown };
    if (f.version !== 1 || !Array.isArray(f.adapters)) return undefined;
    const str = (v: unknown) => (typeof v === 'string' ? v : '');
    return f.adapters.map((a: Record<string, unknown>) => create(AdapterSpecSchema, { name: str(a.name), repo: str(a.repo), revision: str(a.revision), pinned: a.pinned === true }));
  } catch {
    return undefined;
  }
}

export async function writeDesiredAdapters(stateDir: string, shardId: string, adapters: readonly AdapterSpec[]): Promise<void> {
  const path = desiredAdaptersPath(stateDir, shardId);
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  const plain = adapters.map((a) => ({ name: a.name, repo: a.repo, revision: a.revision, pinned: a.pinned }));
  await writeFileAtomic(path, `${JSON.stringify({ version: 1, adapters: plain })}\n`);
}

export function removeDesiredAdapters(stateDir: string, shardId: string): void {
  rmSync(desiredAdaptersPath(stateDir, shardId), { force: true });
}
